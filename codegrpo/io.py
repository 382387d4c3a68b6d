"""Atomic file output and small JSON helpers shared by every stage.

Every output of the pipeline is written to a temporary file in the destination's folder and renamed
into place only once it is complete, so a failed or killed job never leaves a file that looks finished.
A job with several outputs wraps its writes in :func:`atomic_group`: the temporaries are renamed only once
all of them are complete, so a job that fails (disk full) or is killed while writing its second output does
not leave its first output behind either.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; rename it to ``dest`` when the block exits cleanly.

    On an exception the temporary file is removed and ``dest`` is left untouched.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix + ".tmp", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        group = _GROUP.get()
        if group is not None:  # inside atomic_group(): renamed when the whole group is complete
            group.append((tmp_path, dest))
        else:
            os.replace(tmp_path, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


_GROUP: contextvars.ContextVar[list | None] = contextvars.ContextVar("codegrpo_atomic_group", default=None)


@contextlib.contextmanager
def atomic_group() -> Iterator[None]:
    """Make every atomic write inside the block part of one unit: each output stays a temporary file until
    the block exits cleanly, then all are renamed into place; on an exception (or a kill) none is.

    Nested groups join the outermost one.
    """
    if _GROUP.get() is not None:
        yield
        return
    pending: list[tuple[Path, Path]] = []
    token = _GROUP.set(pending)
    try:
        yield
    except BaseException:
        for tmp, _ in pending:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise
    finally:
        _GROUP.reset(token)
    done = 0
    try:
        for tmp, dest in pending:
            os.replace(tmp, dest)
            done += 1
    except BaseException:
        for tmp, _ in pending[done:]:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_open(dest: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8"):
    """Open a temporary file for writing; it replaces ``dest`` only if the block completes."""
    if "b" in mode:
        encoding = None
    with atomic_path(dest) as tmp:
        with open(tmp, mode, encoding=encoding) as fh:
            yield fh


def write_json(dest: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    with atomic_open(dest) as fh:
        json.dump(obj, fh, indent=indent, sort_keys=False, ensure_ascii=False)
        fh.write("\n")


def write_jsonl(dest: str | os.PathLike, rows: Iterable[dict]) -> int:
    n = 0
    with atomic_open(dest) as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False))
            fh.write("\n")
            n += 1
    return n


def log_to(path: str | os.PathLike) -> None:
    """Send the library's log records to a job's log file (used by every workflow script)."""
    import logging

    logging.basicConfig(
        filename=path,
        filemode="w",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def iter_jsonl(path: str | os.PathLike, error: type[Exception] = ValueError, fh=None) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSONL file (or of the open text file ``fh``); a line
    that is not a JSON object raises ``error`` naming the file and the line."""
    with contextlib.ExitStack() as stack:
        if fh is None:
            fh = stack.enter_context(open(path, encoding="utf-8"))
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{path}: line {lineno}: not valid JSON: {exc.msg}") from exc
            if not isinstance(obj, dict):
                raise error(f"{path}: line {lineno}: a record must be a JSON object")
            yield lineno, obj


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]

"""Atomic file output and small JSON helpers shared by every stage.

Every output of the pipeline is written to a temporary file in the destination's folder and renamed
into place only once it is complete, so a failed or killed job never leaves a file that looks finished.
"""

from __future__ import annotations

import contextlib
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
        os.replace(tmp_path, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
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


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]

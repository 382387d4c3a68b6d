"""One trainer per run folder: an exclusive lock held for a training run's whole lifecycle.

Two trainers writing to the same ``results/runs/<run>/`` (a second Snakemake driver started by mistake, a job
still running while the same rule is forced again, two sites sharing a results folder) would interleave
checkpoints and metrics and move each other's folder aside. :func:`run_dir_lock` takes an exclusive
``flock`` on ``<run_dir>.lock`` (beside the folder, since the folder itself may be moved aside and recreated)
and fails at once, naming the lock file and its holder, when another process holds it.

The kernel releases the lock when the holder dies, so a job killed by preemption or ``scancel`` leaves nothing to
clean up: its retry (on any node) takes the lock again. The lock file stays behind, holding the last holder's
host, pid, SLURM job id and start time; its presence alone means nothing. On a file system without ``flock``
(some Lustre mounts without ``-o flock``) the lock cannot be taken: the run goes on with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import logging
import os
import socket
import time
from pathlib import Path

log = logging.getLogger(__name__)


class RunLockedError(RuntimeError):
    """Another process holds the run folder's lock."""


def lock_path(run_dir: str | os.PathLike) -> Path:
    run_dir = Path(run_dir).resolve()
    return run_dir.with_name(run_dir.name + ".lock")


def _holder() -> dict:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@contextlib.contextmanager
def run_dir_lock(run_dir: str | os.PathLike):
    """Hold the exclusive lock of ``run_dir`` for the ``with`` block; raise :class:`RunLockedError` if taken."""
    path = lock_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = path.read_text(encoding="utf-8").strip() or "unknown"
            except OSError:
                holder = "unknown"
            raise RunLockedError(
                f"{Path(run_dir)} is in use by another trainer (lock {path}, held by {holder}); wait for it to end "
                f"or cancel it (scancel / kill) — the lock goes with its process, nothing needs deleting"
            ) from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            log.warning("%s: the file system does not support flock (%s): the run folder is not locked", path, exc)
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(_holder()) + "\n").encode())
        yield path
    finally:
        os.close(fd)  # releases the lock


def locked_run_dir(fn):
    """Decorator for a training entry point with a ``run_dir`` keyword: the whole call holds the folder's lock."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with run_dir_lock(kwargs["run_dir"]):
            return fn(*args, **kwargs)

    return wrapper

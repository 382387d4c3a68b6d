"""Helpers of the Snakemake scripts (``workflow_scripts/``): the error prologue every script shares."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator


@contextlib.contextmanager
def failure_logged(message: str, *args) -> Iterator[None]:
    """Run a script's body: an exception is written to the job's log (``message % args`` and the traceback,
    see :func:`codegrpo.io.log_to`) and raised again, so Snakemake marks the job failed."""
    try:
        yield
    except Exception:
        logging.exception(message, *args)
        raise

"""Helpers of the Snakemake scripts (``workflow_scripts/``): the prologue every script shares."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

from codegrpo.io import log_to


@contextlib.contextmanager
def failure_logged(message: str, *args) -> Iterator[None]:
    """Run a script's body: an exception is written to the job's log (``message % args`` and the traceback,
    see :func:`codegrpo.io.log_to`) and raised again, so Snakemake marks the job failed."""
    try:
        yield
    except Exception:
        logging.exception(message, *args)
        raise


@contextlib.contextmanager
def script_job(sm: Any, what: str | None = None) -> Iterator[Any]:
    """The prologue of every workflow script, ``with script_job(snakemake) as sm:``: the logging records go to
    the job's log ``sm.log[0]`` (:func:`codegrpo.io.log_to`) and the body runs under :func:`failure_logged`
    with the message ``<what> failed``, ``what`` being the rule's name unless given. Yields ``sm``."""
    log_to(sm.log[0])
    with failure_logged("%s failed", what or sm.rule):
        yield sm


def codegen_scoring(sm: Any) -> dict[str, Any]:
    """The sandbox-scoring keyword arguments the code-generation scripts pass to :mod:`codegrpo.eval.codegen`
    (``run_model_benchmarks``, ``score_samples_files``, ``run_reference``), from their rule: ``limit``,
    ``workers`` (the job's threads), ``timeout`` (``params.timeout_s``), ``sandbox_limits`` (``params.sandbox``),
    ``cfg`` (every param) and ``suites``."""
    p = sm.params
    return dict(
        limit=p.limit,
        workers=sm.threads,
        timeout=p.timeout_s,
        sandbox_limits=p.sandbox,
        cfg=dict(p.items()),
        suites=p.suites,
    )

"""Runs KodCode's pytest harness inside a sandbox job; the only module of the sandbox that touches pytest.

Loaded by the supervisor (:mod:`codegrpo.sandbox.supervisor`) inside the sandbox, by file path. Standard library
at top level; pytest is imported by the functions that need it.

Why private ``_pytest`` APIs. In fork-server mode the supervisor configures pytest and starts its session
*once*, before any job is known, for the supervisor's fixed job path (``<workspace>/job``); each forked job
then only collects and runs its test file. ``pytest.main`` cannot be split that way: it always builds a new
config, registers the plugins and runs ``pytest_configure`` / ``pytest_sessionstart``, which is most of its
per-call cost. The split needs ``_pytest.config._prepareconfig``, ``_pytest.main.Session.from_config``,
``Config._do_configure`` and the session hooks, none of which is public. This module isolates that use:

* :func:`prepare_session` (supervisor, at start) and :func:`run_prepared_session` (job) are the only users;
* if a future pytest changes these APIs, :func:`prepare_session` raises, the supervisor logs it and every job
  uses the public ``pytest.main`` instead (:func:`pytest_child`), with the same outcome, only slower;
* ``benchmarks/bench_sandbox.py`` and ``tests/test_execution.py`` check that both paths give identical results.

The job reports to the supervisor through JSON lines on file descriptor :data:`REPORT_FD`: whether the solution
was imported, how many items were collected, collection errors and each test's outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

REPORT_FD = 3  # the job's report file descriptor (set up by the supervisor before the job runs)

# pytest plugins a KodCode test never needs (caches, reports to files, debugger, doctest collection ...);
# leaving them out makes each run cheaper. Fixtures tests use (tmp_path, monkeypatch, capsys, caplog,
# recwarn) stay available.
_NO_PLUGINS = [a for name in ("cacheprovider", "stepwise", "unraisableexception", "threadexception",
                              "pastebin", "junitxml", "doctest", "legacypath", "setuponly", "setupplan",
                              "debugging", "faulthandler") for a in ("-p", f"no:{name}")]

_PRELOAD_STDLIB = ("unittest", "doctest", "pdb", "typing", "collections", "itertools", "functools", "math", "re",
                   "heapq", "bisect", "string", "random", "decimal", "fractions", "datetime", "timeit")


def emit(obj) -> None:
    """One JSON line to the supervisor (ignored when the job closed the descriptor)."""
    try:
        os.write(REPORT_FD, (json.dumps(obj) + "\n").encode())
    except OSError:
        pass


class Reporter:
    """pytest plugin: collected count, collection errors and each test's outcome, as JSON lines on fd 3."""

    def pytest_collectreport(self, report):
        if report.failed:
            emit({"collect_error": True})

    def pytest_collection_finish(self, session):
        emit({"collected": len(session.items)})

    def pytest_runtest_logreport(self, report):
        ok = report.passed if report.when == "call" else not report.failed
        if report.when == "call" or report.failed:
            emit({"test": [report.nodeid, bool(ok and not getattr(report, "wasxfail", False))]})


def pytest_args(job_dir: str) -> list[str]:
    return ["-q", *_NO_PLUGINS, "--rootdir", job_dir, "--confcutdir", job_dir,
            "-c", os.path.join(job_dir, ".pytest.ini"), "-o", "addopts=", "--capture=no",
            "-W", "ignore::DeprecationWarning", os.path.join(job_dir, "test_solution.py")]


def _write_ini(job_dir: str) -> None:
    with open(os.path.join(job_dir, ".pytest.ini"), "w") as fh:
        fh.write("[pytest]\n")


def import_solution(job_dir: str) -> bool:
    """Import ``solution`` from the job directory; report whether it executed without error."""
    import importlib
    import tempfile as _tempfile

    _tempfile.tempdir = None  # recomputed from this job's TMPDIR
    sys.path.insert(0, job_dir)
    sys.dont_write_bytecode = True
    try:
        importlib.import_module("solution")
    except BaseException as exc:  # noqa: BLE001  (SystemExit, MemoryError ... all mean "did not execute")
        emit({"executed": False, "import_error": f"{type(exc).__name__}: {exc}"[:2000]})
        return False
    emit({"executed": True})
    return True


def pytest_child(job_dir: str) -> int:
    """Runs in the forked job process (already limited and unprivileged): import the solution, run pytest."""
    if not import_solution(job_dir):
        return 3
    if _PREPARED is not None:
        return run_prepared_session()
    import pytest

    _write_ini(job_dir)
    try:
        return int(pytest.main(pytest_args(job_dir), plugins=[Reporter()]))
    except BaseException as exc:  # noqa: BLE001
        emit({"collect_error": True, "error": repr(exc)[:500]})
        return 4


def preload() -> None:
    """Import pytest, every built-in pytest plugin and the stdlib modules they pull in lazily."""
    import importlib

    import pytest  # noqa: F401  (the fork server's point: jobs start with pytest imported)
    from _pytest.config import default_plugins, essential_plugins

    for name in sorted(set(default_plugins) | set(essential_plugins)):
        try:
            importlib.import_module(f"_pytest.{name}")
        except Exception:  # noqa: BLE001
            pass
    for name in _PRELOAD_STDLIB:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            pass


# Fork-server mode: the config and the started session for this supervisor's fixed job path (private APIs).
_PREPARED: tuple | None = None


def prepare_session(job_dir: str) -> None:
    """Configure pytest and start its session once, for ``job_dir``; every forked job inherits them."""
    global _PREPARED
    from _pytest.config import _prepareconfig
    from _pytest.main import Session

    os.makedirs(job_dir, exist_ok=True)
    _write_ini(job_dir)
    config = _prepareconfig(pytest_args(job_dir), plugins=[Reporter()])
    session = Session.from_config(config)
    session.exitstatus = 0
    config._do_configure()
    config.hook.pytest_sessionstart(session=session)
    sys.stdout.flush()
    _PREPARED = (config, session)
    shutil.rmtree(job_dir, ignore_errors=True)


def run_prepared_session() -> int:
    """Collect and run the job's test file in the prepared session; pytest's exit status."""
    from _pytest.outcomes import Exit

    config, session = _PREPARED
    try:
        config.hook.pytest_collection(session=session)
        config.hook.pytest_runtestloop(session=session)
        status = 1 if session.testsfailed else (5 if session.testscollected == 0 else 0)
    except (KeyboardInterrupt, Exit):  # Session.Interrupted (collection errors) is a KeyboardInterrupt
        status = 2
    except BaseException as exc:  # noqa: BLE001
        emit({"collect_error": True, "error": repr(exc)[:500]})
        status = 3
    session.exitstatus = status
    try:
        config.hook.pytest_sessionfinish(session=session, exitstatus=status)
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):  # the reporter writes to the latter
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    return status

"""The trusted test runner of a sandbox job: runs the test file with module ``solution`` as a proxy.

Loaded by the supervisor (:mod:`codegrpo.sandbox.supervisor`) inside the sandbox, by file path. Standard library
at top level; pytest is imported by the functions that need it.

A pytest job has two processes (docs/sandbox.md, *Results the solution cannot write*): the *candidate* imports
``solution.py`` and serves requests (:func:`codegrpo.sandbox.rpc.serve_candidate`); the *runner* (this module,
:func:`runner_child`) runs pytest on the test file, where ``solution`` is :class:`codegrpo.sandbox.rpc.SolutionModule`
and values from the solution arrive as plain data. The runner never executes the solution's code, runs under
another uid, and alone holds the report descriptor :data:`REPORT_FD` (an unlinked file the supervisor reads).

Why private ``_pytest`` APIs. In fork-server mode the supervisor configures pytest and starts its session
*once*, before any job is known, for the supervisor's fixed test path (``<workspace>/job/tests``); each forked
runner then only collects and runs its test file. ``pytest.main`` cannot be split that way: it always builds a
new config, registers the plugins and runs ``pytest_configure`` / ``pytest_sessionstart``, which is most of its
per-call cost. The split needs ``_pytest.config._prepareconfig``, ``_pytest.main.Session.from_config``,
``Config._do_configure`` and the session hooks, none of which is public. This module isolates that use:

* :func:`prepare_session` (supervisor, at start) and :func:`run_prepared_session` (runner) are the only users;
* if a future pytest changes these APIs, :func:`prepare_session` raises, the supervisor logs it and every job
  uses the public ``pytest.main`` instead, with the same outcome, only slower;
* ``benchmarks/bench_sandbox.py`` and ``tests/sandbox/test_client.py`` check that both paths give identical results.

The runner reports JSON lines: whether the solution's first message arrived (``hello``), the collected items
(node id, function name), collection errors, each test's outcome, whether the solution still answered at the
end (``alive``) and ``done``. A failed report write makes the runner exit with :data:`WRITE_FAILED`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

REPORT_FD = 3  # the runner's report descriptor (an unlinked file, set up by the supervisor)
SOCK_FD = 4  # the runner's end of the socket to the candidate
CANDIDATE_SOCK_FD = 3  # the candidate's end
WRITE_FAILED = 97  # the runner's exit status when a report line could not be written

if __package__:
    from codegrpo.sandbox import rpc
else:  # loaded by file path inside the sandbox
    import importlib.util as _ilu

    _spec = _ilu.spec_from_file_location(
        "_codegrpo_rpc", os.path.join(os.path.dirname(os.path.abspath(__file__)), "rpc.py")
    )
    rpc = _ilu.module_from_spec(_spec)
    sys.modules["_codegrpo_rpc"] = rpc
    _spec.loader.exec_module(rpc)

# pytest plugins a KodCode test never needs (caches, reports to files, debugger, doctest collection ...);
# leaving them out makes each run cheaper. Fixtures tests use (tmp_path, monkeypatch, capsys, caplog,
# recwarn) stay available.
_NO_PLUGINS = [
    a
    for name in (
        "cacheprovider",
        "stepwise",
        "unraisableexception",
        "threadexception",
        "pastebin",
        "junitxml",
        "doctest",
        "legacypath",
        "setuponly",
        "setupplan",
        "debugging",
        "faulthandler",
    )
    for a in ("-p", f"no:{name}")
]

_PRELOAD_STDLIB = (
    "unittest",
    "doctest",
    "pdb",
    "typing",
    "collections",
    "itertools",
    "functools",
    "math",
    "re",
    "heapq",
    "bisect",
    "string",
    "random",
    "decimal",
    "fractions",
    "datetime",
    "timeit",
    "socket",
    "json",
)

_WRITE_ERROR = False


def emit(obj) -> None:
    """One JSON line to the report (a failed write is remembered: the runner then exits with WRITE_FAILED)."""
    global _WRITE_ERROR
    data = (json.dumps(obj) + "\n").encode()
    try:
        if os.write(REPORT_FD, data) != len(data):
            _WRITE_ERROR = True
    except OSError:
        _WRITE_ERROR = True


class Reporter:
    """pytest plugin: collected items, collection errors and each test's outcome, as JSON lines."""

    def pytest_collectreport(self, report):
        if report.failed:
            emit({"collect_error": True})

    def pytest_collection_finish(self, session):
        emit({"collected": [[it.nodeid, getattr(it, "originalname", None) or it.name] for it in session.items]})

    def pytest_runtest_logreport(self, report):
        ok = report.passed if report.when == "call" else not report.failed
        if report.when == "call" or report.failed:
            emit({"test": [report.nodeid, bool(ok and not getattr(report, "wasxfail", False))]})


def pytest_args(tests_dir: str) -> list[str]:
    return [
        "-q",
        *_NO_PLUGINS,
        "--rootdir",
        tests_dir,
        "--confcutdir",
        tests_dir,
        "--noconftest",
        "-c",
        os.path.join(tests_dir, ".pytest.ini"),
        "-o",
        "addopts=",
        "--capture=no",
        "-W",
        "ignore::DeprecationWarning",
        os.path.join(tests_dir, "test_solution.py"),
    ]


def write_ini(tests_dir: str) -> None:
    with open(os.path.join(tests_dir, ".pytest.ini"), "w") as fh:
        fh.write("[pytest]\n")


def _forward_output(out, err) -> None:
    """What the solution printed during a call, written where the test's own prints go (capsys sees it)."""
    for text, stream in ((out, sys.stdout), (err, sys.stderr)):
        if isinstance(text, str) and text:
            try:
                stream.write(text[: rpc.MAX_OUTPUT])
            except (OSError, ValueError):
                pass


def runner_child(tests_dir: str) -> int:
    """Runs in the forked runner (limited, its own uid): wait for the solution's names, run pytest, report."""
    import tempfile as _tempfile

    _tempfile.tempdir = None  # recomputed from this job's TMPDIR
    sys.dont_write_bytecode = True
    for key in [k for k in os.environ if k.startswith(("PYTEST_", "PY_COLORS", "COV_"))]:
        if key != "PYTEST_DISABLE_PLUGIN_AUTOLOAD":
            del os.environ[key]
    try:
        ep, first = rpc.connect_runner(SOCK_FD, _forward_output)
        if "hello" not in first and not isinstance(first.get("import_error"), str):
            raise rpc.ProtocolError("the solution's first message is neither its names nor its import error")
        if "hello" not in first:
            err = first.get("import_error")
            emit({"hello": False, "import_error": err if isinstance(err, str) else "no answer from the solution"})
            emit({"done": True})
            return WRITE_FAILED if _WRITE_ERROR else 3
        sys.modules["solution"] = rpc.solution_module(ep, first)
    except (rpc.ProtocolError, rpc.SolutionDied) as exc:
        emit({"hello": False, "import_error": f"{type(exc).__name__}: {exc}"[:2000]})
        emit({"protocol_errors": rpc.ProtocolError.count})
        emit({"done": True})
        return WRITE_FAILED if _WRITE_ERROR else 3
    emit({"hello": True})
    if _PREPARED is not None:
        status = run_prepared_session()
    else:
        import pytest

        write_ini(tests_dir)
        try:
            status = int(pytest.main(pytest_args(tests_dir), plugins=[Reporter()]))
        except BaseException as exc:  # noqa: BLE001
            emit({"collect_error": True, "error": repr(exc)[:500]})
            status = 4
    emit({"alive": rpc.ping(ep)})
    emit({"protocol_errors": rpc.ProtocolError.count})
    emit({"done": True})
    return WRITE_FAILED if _WRITE_ERROR else status


def driver_child(tests_dir: str, driver_src: str, mode: str) -> int:
    """Runs in the forked runner of a ``suite`` job: the evaluation driver's trusted checks
    (:func:`codegrpo.eval.suite_driver.run_runner`) with module ``solution`` as a proxy; the verdict goes to
    the report descriptor."""
    import builtins
    import tempfile as _tempfile

    _tempfile.tempdir = None
    sys.dont_write_bytecode = True
    ns = {"__name__": "_codegrpo_suite_driver", "__builtins__": builtins}
    exec(compile(driver_src, "suite_driver.py", "exec"), ns)  # noqa: S102  (the host's own driver source)
    try:
        ns["run_runner"](mode, tests_dir, rpc, SOCK_FD, emit)
    except BaseException as exc:  # noqa: BLE001  (no verdict: the host scores the sample 0)
        emit({"runner_error": f"{type(exc).__name__}: {exc}"[:500]})
    emit({"protocol_errors": rpc.ProtocolError.count})
    emit({"done": True})
    return WRITE_FAILED if _WRITE_ERROR else 0


def candidate_child(cand_dir: str) -> int:
    """Runs in the forked candidate (limited, its own uid): import the solution and serve the runner."""
    import tempfile as _tempfile

    _tempfile.tempdir = None
    return rpc.serve_candidate(CANDIDATE_SOCK_FD, cand_dir)


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
    """Configure pytest and start its session once, for ``job_dir/tests``; every forked runner inherits them."""
    global _PREPARED
    from _pytest.config import _prepareconfig
    from _pytest.main import Session

    tests_dir = os.path.join(job_dir, "tests")
    os.makedirs(tests_dir, exist_ok=True)
    write_ini(tests_dir)
    config = _prepareconfig(pytest_args(tests_dir), plugins=[Reporter()])
    session = Session.from_config(config)
    session.exitstatus = 0
    config._do_configure()
    config.hook.pytest_sessionstart(session=session)
    sys.stdout.flush()
    _PREPARED = (config, session)
    shutil.rmtree(job_dir, ignore_errors=True)


def run_prepared_session() -> int:
    """Collect and run the job's test file in the prepared session (runner); pytest's exit status."""
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

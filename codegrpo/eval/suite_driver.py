"""The test driver of the code-generation suites (EvalPlus, LiveCodeBench, BigCodeBench), standard library only.

Two uses (docs/sandbox.md, *Evaluation harnesses*):

* ``python main.py evalplus_gt`` in a plain sandbox job (``Sandbox.run_python``): the *canonical* solution's
  outputs on the task's inputs (``task.pkl``), written to ``expected.pkl`` and ``result.json``. No candidate
  code runs in this job.
* the trusted *runner* of a two-process ``suite`` job (``Sandbox.run_suite``): :func:`run_runner` is called by
  ``codegrpo.sandbox.pytest_driver.driver_child`` in the runner process, which never executes the candidate's
  code. The candidate's program runs in the other process (``codegrpo.sandbox.rpc.serve_candidate``, under its
  own uid); calls cross the socket and return values come back as plain data (``rpc.py``), so every comparison
  with an expected value, and the verdict itself (a JSON line on the report descriptor only the runner holds),
  are made here. The task and the expected outputs lie in the runner's directory, which the candidate's uid
  cannot read. ``result.json`` is no longer read for these suites.

The checks follow each benchmark's own evaluation (docs/evaluation.md names the differences):

* ``evalplus_gt`` / ``evalplus``: EvalPlus differential testing. Expected outputs come from running the
  canonical solution on deep copies of the inputs (time recorded per input); a candidate passes an input when
  its output equals the expected one, or, for float outputs, is within ``atol`` (``atol`` 0 with float outputs
  means 1e-6) with rtol 1e-7 and the same type and length; the benchmark's special oracles apply. Each input
  has its own time limit; the first failing input ends the check (EvalPlus's fast check).
* ``lcb``: LiveCodeBench. Functional tests call ``Solution().<func_name>`` (or the module-level function) on
  the JSON-decoded input lines and compare with ``==`` (a tuple counts as a list); stdin tests run the program
  as a process on the input and compare the stripped output lines exactly, else element-wise as decimals. The
  first failing test ends the check.
* ``bcb``: BigCodeBench. The program and the test file run as one module ``__test__`` (``sys``, ``os`` and
  ``environ`` predefined, TZ=UTC); the ``TestCases`` class runs under unittest with one time limit; the task
  passes when no test fails or errors. The benchmark's tests need the solution's own objects (mocks patch its
  imports, DataFrames and plots are inspected), so they run in the candidate's process
  (:data:`codegrpo.eval.suite_candidates.BCB_CANDIDATE`); the runner judges the plain-data account it gets back
  against the test names of the file as written (the candidate runs them under random names,
  :mod:`codegrpo.eval.bcb_tests`), hidden canary tests that must fail, and a run-time probe for always-equal
  classes (docs/sandbox.md names what this does not guarantee).

The sandbox runs the driver as one source text (:func:`codegrpo.eval.suites.common.driver_source`, sent as
``Sandbox.run_suite``'s driver and ``run_python``'s ``main.py``): the comparisons of :mod:`codegrpo.eval.suite_checks`
followed by this file without its import of them. Both files are standard library only. The candidate-side
sources, which never run in the runner, are :mod:`codegrpo.eval.suite_candidates`.
"""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import signal
import sys
import time

# On the host an import; in the sandbox this statement is replaced by suite_checks.py's text (its source comes
# first in codegrpo.eval.suites.common.driver_source): the sandbox runs one self-contained source.
from codegrpo.eval.suite_checks import always_equal_classes, evalplus_match, lcb_stdio_match

RESULT = "result.json"


class _Timeout(BaseException):
    """Raised by the alarm (a BaseException, so that a candidate's ``except Exception`` does not swallow it)."""


_FIRED: list = []  # set when the alarm went off (a test runner may catch the exception itself)
_STOP: list = []  # objects with .stop() to call at the alarm (a unittest result)


def _alarm(signum, frame):
    _FIRED.append(True)
    for obj in _STOP:
        obj.stop()
    raise _Timeout()


def _limit(seconds: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, max(float(seconds), 0.001))


def _clear() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def _write(obj: dict) -> None:
    tmp = RESULT + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, default=repr)
    os.replace(tmp, RESULT)


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


class _Quiet:
    """Swallow the candidate's stdout / stderr (and give it an empty stdin)."""

    def __enter__(self):
        self.saved = sys.stdout, sys.stderr, sys.stdin
        sys.stdout = sys.stderr = io.StringIO()
        sys.stdin = io.StringIO("")
        return self

    def __exit__(self, *exc):
        sys.stdout, sys.stderr, sys.stdin = self.saved
        return False


def _load_task():
    with open("task.pkl", "rb") as fh:
        return pickle.load(fh)


def _exec_program(path: str, module_name: str = "solution") -> dict:
    with open(path, encoding="utf-8") as fh:
        src = fh.read()
    glb: dict = {"__name__": module_name, "__file__": path, "__builtins__": __builtins__}
    exec(compile(src, path, "exec"), glb)
    return glb


# --------------------------------------------------------------------------------------------------------
# EvalPlus


def evalplus_gt() -> None:
    task = _load_task()
    try:
        with _Quiet():
            glb = _exec_program("solution.py")
        fn = glb[task["entry_point"]]
    except BaseException as exc:  # noqa: BLE001
        _write({"ok": False, "error": "canonical solution does not run: " + _short(exc)})
        return
    expected, times = {}, {}
    for part in ("base", "plus"):
        outs, ts = [], []
        for i, inp in enumerate(task["inputs"][part]):
            args = copy.deepcopy(inp)
            t0 = time.perf_counter()
            try:
                with _Quiet():
                    out = fn(*args)
            except BaseException as exc:  # noqa: BLE001
                _write({"ok": False, "error": f"canonical solution fails on {part} input {i}: {_short(exc)}"})
                return
            ts.append(time.perf_counter() - t0)
            outs.append(out is not None if task.get("output_not_none") else out)
        expected[part], times[part] = outs, ts
    with open("expected.pkl", "wb") as fh:
        pickle.dump(expected, fh)
    _write({"ok": True, "times": times})


def _connect(rpc, sock_fd: int, limit: float):
    """Runner: wait (at most ``limit`` s) for the solution's first message; (module proxy, None) or (None, why)."""
    _limit(limit)
    try:
        ep, first = rpc.connect_runner(sock_fd, None)
        _clear()
    except _Timeout:
        return None, "timeout"
    except (rpc.SolutionDied, rpc.ProtocolError) as exc:
        _clear()
        return None, _short(exc)
    if "hello" not in first:
        err = first.get("import_error")
        if not isinstance(err, str):  # counted: the solution's side wrote into the socket itself
            return None, _short(
                rpc.ProtocolError("the solution's first message is neither its names nor its import error")
            )
        return None, err
    try:
        return rpc.solution_module(ep, first), None
    except rpc.ProtocolError as exc:
        return None, _short(exc)


def _solution_callable(rpc, sock_fd: int, limit: float, find, res: dict) -> tuple[bool, object]:
    """``(True, find(module))``: the function to test, looked up in the solution's module (through its process)
    within ``limit`` seconds, ``res["executed"]`` set; ``(False, None)`` with ``res["error"]`` saying why where
    the solution's process cannot be reached or the lookup fails or runs out of time."""
    sol, err = _connect(rpc, sock_fd, limit)
    if sol is None:
        res["error"] = err
        return False, None
    try:
        _limit(limit)
        fn = find(sol)
        _clear()
    except BaseException as exc:  # noqa: BLE001
        _clear()
        res["error"] = "timeout" if isinstance(exc, _Timeout) else _short(exc)
        return False, None
    res["executed"] = True
    return True, fn


def _r_evalplus(task: dict, tests_dir: str, rpc, sock_fd: int) -> dict:
    """Runner side of EvalPlus's check: each call crosses to the solution's process, the output comes back as
    plain data and is compared here with the expected output (which the solution's process cannot read)."""
    with open(os.path.join(tests_dir, "expected.pkl"), "rb") as fh:
        expected = pickle.load(fh)
    res: dict = {"executed": False, "error": None}
    found, fn = _solution_callable(
        rpc, sock_fd, task["import_limit"], lambda sol: getattr(sol, task["entry_point"]), res
    )
    if not found:
        return res
    for part in task["parts"]:
        inputs, limits = task["inputs"][part], task["time_limits"][part]
        deadline = time.monotonic() + task["part_timeout"][part]  # EvalPlus: min(cap, sum of limits) + 1 per part
        n_pass, status, err = 0, "pass", None
        for i, inp in enumerate(inputs):
            left = deadline - time.monotonic()
            if left <= 0:
                status, err = "timeout", f"input {i}: the part's time limit {task['part_timeout'][part]:.2f} s"
                break
            part_bound = left < limits[i]
            try:
                _limit(min(limits[i], left))
                out = fn(*inp)
                _clear()
                ok = evalplus_match(task, inp, out, expected[part][i])
            except _Timeout:
                status, err = (
                    "timeout",
                    (
                        f"input {i}: the part's time limit {task['part_timeout'][part]:.2f} s"
                        if part_bound
                        else f"input {i}: time limit {limits[i]:.2f} s"
                    ),
                )
                break
            except BaseException as exc:  # noqa: BLE001
                _clear()
                status, err = "fail", f"input {i}: {_short(exc)}"
                break
            if not ok:
                status, err = "fail", f"input {i}: wrong output"
                break
            n_pass += 1
        _clear()
        res[part] = {"status": status, "n_pass": n_pass, "n": len(inputs), "error": err}
        if status != "pass":
            break
    return res


# --------------------------------------------------------------------------------------------------------
# LiveCodeBench


def _test_failed(res: dict, i: int, per_test: float, exc: BaseException) -> None:
    """LiveCodeBench test ``i`` timed out (``_Timeout``) or raised ``exc``: its verdict goes into ``res`` (the first
    failing test ends the check)."""
    if isinstance(exc, _Timeout):
        res.update(status="timeout", error=f"test {i}: time limit {per_test:g} s")
        return
    _clear()
    res.update(error=f"test {i}: {_short(exc)}")


def _r_lcb(task: dict, tests_dir: str, rpc, sock_fd: int) -> dict:
    """Runner side of LiveCodeBench: outputs cross as plain data and are compared here."""
    tests, per_test = task["tests"], float(task["timeout"])
    res: dict = {"executed": False, "error": None, "n_pass": 0, "n": len(tests), "status": "fail"}
    if task["fn_name"] is None:  # stdin / stdout: the program runs as a process per test (candidate side)
        try:
            compile(task["program"], "prog.py", "exec")
        except SyntaxError as exc:
            res["error"] = _short(exc)
            return res
        sol, err = _connect(rpc, sock_fd, per_test + 5)
        if sol is None:
            res["error"] = err
            return res
        for i, t in enumerate(tests):
            try:
                _limit(per_test + 5)
                r = sol.run(t["input"], per_test)
                _clear()
            except BaseException as exc:  # noqa: BLE001
                _test_failed(res, i, per_test, exc)
                break
            if type(r) is not dict:
                res.update(error=f"test {i}: no answer")
                break
            if r.get("timeout") is True:
                _test_failed(res, i, per_test, _Timeout())
                break
            rc, out, stderr = r.get("rc"), r.get("out"), r.get("err")
            if type(rc) is not int or type(out) is not str:
                res.update(error=f"test {i}: no answer")
                break
            if i == 0:  # execution accuracy: the program runs on the first test without an error
                res["executed"] = rc == 0
            if rc != 0:
                res.update(error=f"test {i}: exit {rc}: " + (stderr if type(stderr) is str else ""))
                break
            if not lcb_stdio_match(out, t["output"]):
                res.update(error=f"test {i}: wrong answer")
                break
            res["n_pass"] += 1
    else:

        def find(sol):
            target = sol.Solution() if task["class_solution"] and hasattr(sol, "Solution") else None
            return getattr(target, task["fn_name"]) if target is not None else getattr(sol, task["fn_name"])

        found, method = _solution_callable(rpc, sock_fd, per_test, find, res)
        if not found:
            return res
        for i, t in enumerate(tests):
            try:
                args = [json.loads(line) for line in t["input"].split("\n")]
                want = json.loads(t["output"])
                _limit(per_test)
                got = method(*args)
                _clear()
            except BaseException as exc:  # noqa: BLE001
                _test_failed(res, i, per_test, exc)
                break
            if isinstance(got, tuple):
                got = list(got)
            if got != want:
                res.update(error=f"test {i}: wrong answer")
                break
            res["n_pass"] += 1
        _clear()
    if res["n_pass"] == len(tests) and tests:
        res.update(status="pass", error=None)
    return res


# --------------------------------------------------------------------------------------------------------
# BigCodeBench


def _r_bcb(task: dict, tests_dir: str, rpc, sock_fd: int) -> dict:
    """Runner side of BigCodeBench: the verdict from the plain-data account of the run, checked here against
    the test names of the test file as written (host-parsed; run under random names, ``test_names`` maps them
    back), the hidden canaries that must fail, and the candidate's always-equal probe."""
    timeout = float(task["timeout"])
    res: dict = {"executed": False, "error": None, "status": "fail", "n": 0, "failed": {}}
    sol, err = _connect(rpc, sock_fd, timeout)
    if sol is None:
        res["error"] = err
        return res
    try:
        _limit(timeout + 5)
        r = sol.run_tests(task["test"], timeout)
        _clear()
    except _Timeout:
        res.update(status="timeout", error=f"time limit {timeout:g} s")
        return res
    except BaseException as exc:  # noqa: BLE001
        _clear()
        res["error"] = _short(exc)
        return res
    if type(r) is not dict or type(r.get("ran")) is not list or type(r.get("failed")) is not dict:
        res["error"] = "no account of the tests"
        return res
    res["executed"] = r.get("executed") is True
    if r.get("timeout") is True:
        res.update(status="timeout", error=f"time limit {timeout:g} s")
        return res
    if r.get("error") is not None:
        res["error"] = str(r.get("error"))[:500]
        res["trace"] = str(r.get("trace"))[-1000:]
        return res
    if always_equal_classes(task["program"]):
        res.update(
            executed=False,
            hack="always_equal",
            error="harness guard fired: always_equal (" + ", ".join(always_equal_classes(task["program"])) + ")",
        )
        return res
    eq = r.get("always_equal")
    if type(eq) is not list:
        res["error"] = "no account of the tests"
        return res
    if eq:  # a class with an always-true __eq__ (or always-false __ne__) was alive in the candidate's process
        res.update(
            executed=False,
            hack="always_equal",
            error="harness guard fired: always_equal (" + ", ".join(str(x) for x in eq)[:200] + ")",
        )
        return res
    ran = [n for n in r["ran"] if type(n) is str]
    failed = {k: str(v)[-600:] for k, v in r["failed"].items() if type(k) is str}
    # the candidate ran the tests under random names (codegrpo.eval.bcb_tests); test_names maps them back
    canaries, orig = set(task["canaries"]), task["test_names"]
    required = set(orig)
    names = set(ran) - canaries
    if not canaries <= set(ran) or not canaries <= set(failed):  # each canary ran and failed
        res["hack"] = "canary"
    elif set(failed) - set(ran):
        res["hack"] = "unknown_test_ids"
    elif required - names:
        res["hack"] = "missing_test_ids"
    elif task["strict_names"] and names - required:
        res["hack"] = "extra_test_ids"
    for canary in canaries:
        failed.pop(canary, None)
    res["n"] = len(names)
    res["failed"] = {orig.get(k, k): v for k, v in failed.items()}
    if res.get("hack"):
        res.update(executed=False, error="harness guard fired: " + res["hack"])
    elif not failed and names:
        res["status"] = "pass"
    elif not names:
        res["error"] = "no test ran"
    return res


_RUNNERS = {"evalplus": _r_evalplus, "lcb": _r_lcb, "bcb": _r_bcb}


def run_runner(mode: str, tests_dir: str, rpc, sock_fd: int, emit) -> None:
    """The trusted runner of a ``suite`` job (called by ``codegrpo.sandbox.pytest_driver.driver_child``): read
    the task from the runner's own directory, run the checks against the solution's process, emit the verdict.
    """
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    signal.signal(signal.SIGALRM, _alarm)
    with open(os.path.join(tests_dir, "task.pkl"), "rb") as fh:
        task = pickle.load(fh)
    emit({"verdict": _RUNNERS[mode](task, tests_dir, rpc, sock_fd)})


MODES = {"evalplus_gt": evalplus_gt}

if __name__ == "__main__":
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    MODES[sys.argv[1]]()

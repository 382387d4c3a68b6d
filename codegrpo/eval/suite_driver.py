"""The in-sandbox test driver of the code-generation suites (EvalPlus, LiveCodeBench, BigCodeBench).

Runs as ``main.py`` inside a sandbox job (``codegrpo.sandbox.Sandbox.run_python``), standard library only,
with the job directory as working directory:

    python main.py MODE

``task.pkl`` (written by the host) holds the task; the candidate program is ``solution.py``. The driver writes
``result.json`` (read back by the host; untrusted, like every test outcome of a program that runs in the same
process) and, in mode ``evalplus_gt``, ``expected.pkl`` (the canonical solution's outputs, handed unopened by
the host to later ``evalplus_check`` jobs).

The checks follow each benchmark's own evaluation (docs/evaluation.md names the differences):

* ``evalplus_gt`` / ``evalplus_check``: EvalPlus differential testing. Expected outputs come from running the
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
  passes when no test fails or errors.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
import traceback

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


def _program_failed(res: dict, exc: BaseException) -> None:
    """The candidate program did not load (timeout or exception): stop the timer, record why, write the result."""
    _clear()
    res["error"] = "timeout" if isinstance(exc, _Timeout) else _short(exc)
    _write(res)


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


def _is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    return False


def _close(out, exp, atol: float, rtol: float = 1e-7) -> bool:
    """Element-wise |out - exp| <= atol + rtol * |exp| over (nested) sequences of numbers (NaN never close)."""
    if isinstance(exp, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(exp):
            return False
        return all(_close(o, e, atol, rtol) for o, e in zip(out, exp))
    if isinstance(out, (list, tuple)):
        return False
    try:
        o, e = complex(out), complex(exp)
    except (TypeError, ValueError):
        return False
    if any(math.isnan(v) for v in (o.real, o.imag, e.real, e.imag)):
        return False
    if math.isinf(abs(e)) or math.isinf(abs(o)):
        return o == e
    return abs(o - e) <= atol + rtol * abs(e)


def _poly(xs, x):
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def _surface_area(base_edge, height):  # MBPP+ task 581's oracle (a pyramid's surface, rounded)
    slant = math.sqrt((base_edge / 2) ** 2 + height ** 2)
    return round(base_edge ** 2 + 2 * base_edge * slant)


def _digit_distance(a, b):  # MBPP+ task 558's oracle (digits aligned by zero padding)
    sa, sb = str(a), str(b)
    n = max(len(sa), len(sb))
    return sum(abs(int(x) - int(y)) for x, y in zip(sa.zfill(n), sb.zfill(n)))


def _evalplus_match(task: dict, inp, out, exp) -> bool:
    ep, atol = task["entry_point"], float(task["atol"] or 0)
    exact = out == exp
    if task["dataset"] == "humaneval" and ep == "find_zero":
        return abs(_poly(*inp, out)) <= atol
    if task["dataset"] == "mbpp":
        if ep == "are_equivalent":
            exact = True
        elif ep == "sum_div":
            exact = exact or out == 0
        elif ep == "surface_Area":
            exact = exact or abs(out - _surface_area(*inp)) <= atol
        elif ep == "digit_distance_nums":
            exact = exact or out == _digit_distance(*inp)
        elif ep in task.get("set_eq_tasks", ()):
            exact = set(out) == set(exp)
        elif ep in task.get("not_none_tasks", ()):
            exact = (out == exp) if isinstance(out, bool) else (exp == (out is not None))
    if atol == 0 and _is_floats(exp):
        atol = 1e-6
    if exact:
        return True
    if atol == 0:
        return False
    if type(out) is not type(exp):
        return False
    return _close(out, exp, atol)


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


def evalplus_check() -> None:
    task = _load_task()
    with open("expected.pkl", "rb") as fh:
        expected = pickle.load(fh)
    res: dict = {"executed": False, "error": None}
    _write({**res, "error": "did not finish"})
    signal.signal(signal.SIGALRM, _alarm)
    try:
        _limit(task["import_limit"])
        with _Quiet():
            glb = _exec_program("solution.py")
        _clear()
        fn = glb[task["entry_point"]]
    except BaseException as exc:  # noqa: BLE001
        _program_failed(res, exc)
        return
    res["executed"] = True
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
                with _Quiet():
                    out = fn(*inp)
                _clear()
                ok = _evalplus_match(task, inp, out, expected[part][i])
            except _Timeout:
                status, err = "timeout", (f"input {i}: the part's time limit {task['part_timeout'][part]:.2f} s"
                                          if part_bound else f"input {i}: time limit {limits[i]:.2f} s")
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
        _write(res)
        if status != "pass":
            break
    _write(res)


# --------------------------------------------------------------------------------------------------------
# LiveCodeBench


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.strip().split("\n")]


def _decimals(line: str):
    from decimal import Decimal, InvalidOperation

    try:
        return [Decimal(x) for x in line.split()]
    except (InvalidOperation, ValueError):
        return None


def lcb_stdio_match(got: str, want: str) -> bool:
    a, b = _lines(got), _lines(want)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        dx, dy = _decimals(x), _decimals(y)
        if dx is None or dy is None or dx != dy:
            return False
    return True


def lcb() -> None:
    task = _load_task()
    tests, per_test = task["tests"], float(task["timeout"])
    res: dict = {"executed": False, "error": None, "n_pass": 0, "n": len(tests), "status": "fail"}
    _write({**res, "error": "did not finish"})
    signal.signal(signal.SIGALRM, _alarm)
    prog = task["prelude"] + "\n" + open("solution.py", encoding="utf-8").read()
    if task["fn_name"] is None:  # stdin / stdout: the program runs as a process per test
        with open("prog.py", "w", encoding="utf-8") as fh:
            fh.write(prog)
        try:
            compile(prog, "prog.py", "exec")
        except SyntaxError as exc:
            res["error"] = _short(exc)
            _write(res)
            return
        for i, t in enumerate(tests):
            try:
                p = subprocess.run([sys.executable, "prog.py"], input=t["input"].encode(), capture_output=True,
                                   timeout=per_test)
            except subprocess.TimeoutExpired:
                res.update(status="timeout", error=f"test {i}: time limit {per_test:g} s")
                break
            if i == 0:  # execution accuracy: the program runs on the first test without an error
                res["executed"] = p.returncode == 0
            if p.returncode != 0:
                res.update(error=f"test {i}: exit {p.returncode}: " + p.stderr.decode("utf-8", "replace")[-300:])
                break
            if not lcb_stdio_match(p.stdout.decode("utf-8", "replace"), t["output"]):
                res.update(error=f"test {i}: wrong answer")
                break
            res["n_pass"] += 1
    else:
        try:
            _limit(per_test)
            with _Quiet():
                glb = _exec_program_text(prog)
                target = glb["Solution"]() if "class Solution" in prog and "Solution" in glb else None
            _clear()
            method = getattr(target, task["fn_name"]) if target is not None else glb[task["fn_name"]]
        except BaseException as exc:  # noqa: BLE001
            _program_failed(res, exc)
            return
        res["executed"] = True
        for i, t in enumerate(tests):
            try:
                args = [json.loads(line) for line in t["input"].split("\n")]
                want = json.loads(t["output"])
                _limit(per_test)
                with _Quiet():
                    got = method(*args)
                _clear()
            except _Timeout:
                res.update(status="timeout", error=f"test {i}: time limit {per_test:g} s")
                break
            except BaseException as exc:  # noqa: BLE001
                _clear()
                res.update(error=f"test {i}: {_short(exc)}")
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
    _write(res)


def _exec_program_text(src: str) -> dict:
    glb: dict = {"__name__": "tmp_sol", "__builtins__": __builtins__}
    exec(compile(src, "solution.py", "exec"), glb)
    return glb


# --------------------------------------------------------------------------------------------------------
# BigCodeBench


def bcb() -> None:
    import types
    import unittest

    task = _load_task()
    os.environ["TZ"] = "UTC"
    if hasattr(time, "tzset"):
        time.tzset()
    res: dict = {"executed": False, "error": None, "status": "fail", "n": 0, "failed": {}}
    _write({**res, "error": "did not finish"})
    signal.signal(signal.SIGALRM, _alarm)
    mod = types.ModuleType("__test__")
    mod.__dict__.update({"__builtins__": __builtins__, "__file__": "__test__.py", "__package__": None,
                         "__doc__": None, "sys": sys, "os": os, "environ": os.environ})
    code = open("solution.py", encoding="utf-8").read()
    _limit(task["timeout"])
    try:
        with _Quiet():
            exec(compile(code, "__test__.py", "exec"), mod.__dict__)
        res["executed"] = True
        with _Quiet():
            exec(compile(task["test"], "__test__.py", "exec"), mod.__dict__)
            sys.modules["__test__"] = mod
            suite = unittest.TestLoader().loadTestsFromTestCase(mod.__dict__["TestCases"])
            result = unittest.TestResult()
            _STOP.append(result)
            suite.run(result)
        _clear()
        if _FIRED:
            raise _Timeout()
    except _Timeout:
        _clear()
        res.update(status="timeout", error=f"time limit {task['timeout']:g} s")
        _write(res)
        return
    except BaseException as exc:  # noqa: BLE001
        _clear()
        res["error"] = _short(exc)
        res["trace"] = traceback.format_exc()[-1000:]
        _write(res)
        return
    res["n"] = result.testsRun
    for test, trace in result.failures + result.errors:
        res["failed"][test.id().split(".")[-1]] = trace[-600:]
    if not res["failed"] and result.testsRun > 0:
        res["status"] = "pass"
    elif result.testsRun == 0:
        res["error"] = "no test ran"
    _write(res)


MODES = {"evalplus_gt": evalplus_gt, "evalplus_check": evalplus_check, "lcb": lcb, "bcb": bcb}

if __name__ == "__main__":
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    MODES[sys.argv[1]]()

"""The candidate side of the two-process suite jobs (docs/sandbox.md, *Evaluation harnesses*): the source texts the
host writes as a job's ``solution.py``, imported in the candidate's process (``codegrpo.sandbox.rpc.serve_candidate``,
its own uid) beside the candidate's ``program.py``. The runner side, which judges what these return, is
:mod:`codegrpo.eval.suite_driver`; these texts never run in the runner's process."""

from __future__ import annotations

# The candidate side of a stdin / stdout job: this module is the job's ``solution.py``; the program is
# ``program.py`` beside it and runs as a process per test (what it prints is its answer, compared by the runner).
LCB_STDIO_CANDIDATE = """
import os as _os
import subprocess as _sp
import sys as _sys

_PROG = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "program.py")


def run(inp, timeout):
    try:
        p = _sp.run([_sys.executable, _PROG], input=inp.encode(), capture_output=True, timeout=timeout)
    except _sp.TimeoutExpired:
        return {"timeout": True}
    return {"rc": p.returncode, "out": p.stdout.decode("utf-8", "replace"),
            "err": p.stderr.decode("utf-8", "replace")[-300:]}
"""


# The candidate side of a BigCodeBench job (its ``solution.py``; the program is ``program.py`` beside it). The
# benchmark runs the program and the test file as one module, so the tests run here, in the solution's process;
# what comes back is plain data (the tests that ran, those that failed), judged by the runner (:func:`_r_bcb`).
BCB_CANDIDATE = """
import io as _io
import os as _os
import signal as _signal
import sys as _sys
import time as _time
import traceback as _tb
import types as _types

_PROG = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "program.py")


class _Timeout(BaseException):
    pass


_FIRED, _STOP = [], []


def _alarm(signum, frame):
    _FIRED.append(True)
    for obj in _STOP:
        obj.stop()
    raise _Timeout()


class _Quiet:
    def __enter__(self):
        self.saved = _sys.stdout, _sys.stderr, _sys.stdin
        _sys.stdout = _sys.stderr = _io.StringIO()
        _sys.stdin = _io.StringIO("")

    def __exit__(self, *exc):
        _sys.stdout, _sys.stderr, _sys.stdin = self.saved
        return False


def _lib_dirs():
    import sysconfig
    dirs = {_sys.prefix, _sys.base_prefix, _sys.exec_prefix, _sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            dirs.add(sysconfig.get_path(key))
        except Exception:
            pass
    return tuple(_os.path.join(_os.path.realpath(d), "") for d in dirs if d)


_LIBS = _lib_dirs()
_FN = _types.FunctionType


def _codes(code, out):
    out.add(code)
    for c in code.co_consts:
        if isinstance(c, _types.CodeType):
            _codes(c, out)
    return out


def _always_equal(skip=frozenset()):
    # Classes alive now whose own __eq__ (__ne__) is a Python function, neither from the installed libraries nor
    # the test file's own code (``skip``), that answers True (False) for two unrelated fresh objects: the
    # always-equal trick, also when the class is built at run time.
    found, seen, todo = [], set(), [object]
    while todo:
        cls = todo.pop()
        try:
            subs = type.__subclasses__(cls)
        except Exception:
            subs = []
        for sub in subs:
            if id(sub) not in seen:
                seen.add(id(sub))
                todo.append(sub)
        try:
            own = type.__getattribute__(cls, "__dict__")
        except Exception:
            continue
        for name, want in (("__eq__", True), ("__ne__", False)):
            fn = own.get(name)
            if type(fn) is not _FN:
                continue
            where = fn.__code__.co_filename
            if fn.__code__ in skip or where.startswith("<frozen") or _os.path.realpath(where).startswith(_LIBS):
                continue
            try:
                got = fn(object(), object())
            except Exception:
                continue
            if got is want:
                found.append(str(getattr(cls, "__qualname__", "?")))
    return sorted(set(found))


def run_tests(test, timeout):
    import unittest

    _os.environ["TZ"] = "UTC"
    if hasattr(_time, "tzset"):
        _time.tzset()
    res = {"executed": False, "error": None, "timeout": False, "ran": [], "failed": {}, "always_equal": []}
    _signal.signal(_signal.SIGALRM, _alarm)
    mod = _types.ModuleType("__test__")
    mod.__dict__.update({"__builtins__": __builtins__, "__file__": "__test__.py", "__package__": None,
                         "__doc__": None, "sys": _sys, "os": _os, "environ": _os.environ})
    with open(_PROG, encoding="utf-8") as fh:
        code = fh.read()
    ran = []

    class _Result(unittest.TestResult):
        def startTest(self, t):
            ran.append(t.id().split(".")[-1])
            super().startTest(t)

    _signal.setitimer(_signal.ITIMER_REAL, max(float(timeout), 0.001))
    try:
        with _Quiet():
            exec(compile(code, "__test__.py", "exec"), mod.__dict__)
            eq = _always_equal()
        res["executed"] = True
        tcode = compile(test, "__test__.py", "exec")
        with _Quiet():
            exec(tcode, mod.__dict__)
            _sys.modules["__test__"] = mod
            suite = unittest.TestLoader().loadTestsFromTestCase(mod.__dict__["TestCases"])
            result = _Result()
            _STOP.append(result)
            suite.run(result)
            eq += _always_equal(_codes(tcode, set()))
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        if _FIRED:
            raise _Timeout()
    except _Timeout:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        res["timeout"] = True
        return res
    except BaseException as exc:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        res["error"] = (type(exc).__name__ + ": " + str(exc))[:500]
        res["trace"] = _tb.format_exc()[-1000:]
        return res
    res["ran"] = [str(n) for n in ran]
    res["always_equal"] = sorted(set(eq))
    for t, trace in result.failures + result.errors:
        res["failed"][str(t.id().split(".")[-1])] = str(trace)[-600:]
    return res
"""

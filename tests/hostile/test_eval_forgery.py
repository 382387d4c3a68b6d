"""Candidates that try to forge the evaluation harnesses' verdicts (issue 22, item 5), on the shipped sample tasks
of EvalPlus (HumanEval+ and MBPP+), LiveCodeBench (a functional and a stdin task) and BigCodeBench.

Each case is a *stub* (the entry point returning a wrong value) plus one trick. The assertion is the same for
every class: the trick gains nothing, i.e. the task is never passed and no more tests pass than with the stub
alone. The reference solutions still pass and a wrong one still fails in the same sandbox. One sandbox serves
the whole module.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from codegrpo import sandbox as ex
from codegrpo.eval import suites as s
from tests.hostile.conftest import always_equal_source

pytestmark = pytest.mark.hostile

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "codegen_samples"
CFG = {
    "evalplus": {"min_time_limit_s": 1.0, "task_timeout_s": 10},
    "bigcodebench": {"timeout_s": 20},
    "livecodebench": {"timeout_s": 2, "task_timeout_s": 30},
}


@pytest.fixture(scope="module")
def sandbox():
    with ex.Sandbox(ex.SandboxLimits(wall_s=30, cpu_s=30, memory_mb=2048, nproc=64, fsize_mb=8)) as sb:
        yield sb


@pytest.fixture(scope="module")
def problems():
    he = {p.problem_id: p for p in s.load_evalplus("humaneval_plus", SAMPLES / "HumanEvalPlus-sample.jsonl")}
    lcb = {
        p.problem_id: p
        for p in s.load_livecodebench(
            SAMPLES / "livecodebench", "v6", solutions=SAMPLES / "livecodebench-solutions.jsonl"
        )
    }
    bcb = {
        p.problem_id: p
        for p in s.load_bigcodebench("bigcodebench_hard", str(SAMPLES / "bigcodebench-hard-sample.jsonl"), "v0.1.4")
    }
    mbpp = {p.problem_id: p for p in s.load_evalplus("mbpp_plus", SAMPLES / "MbppPlus-sample.jsonl")}
    return {
        "evalplus": he["HumanEval/900"],
        "mbpp": mbpp["Mbpp/903"],
        "lcb_fn": lcb["3900"],
        "lcb_stdio": lcb["abc900_a"],
        "bcb": bcb["BigCodeBench/9000"],
    }


def _score(kind, problem, code, sandbox):
    if kind in ("evalplus", "mbpp"):
        return s.score_evalplus(problem, code, 0, sandbox, 10, CFG["evalplus"])
    if kind == "bcb":
        return s.score_bigcodebench(problem, code, 0, sandbox, 20, CFG["bigcodebench"])
    return s.score_livecodebench(problem, code, 0, sandbox, 2, CFG["livecodebench"])


def _program(kind: str, prefix: str, body: str) -> str:
    """The stub with the trick: ``prefix`` at module level, ``body`` as the entry point's body."""
    body = textwrap.indent(textwrap.dedent(body), "    ")
    prefix = textwrap.dedent(prefix)
    if kind == "evalplus":
        return f"{prefix}\n\ndef sum_squares(*args, **kwargs):\n{body}\n"
    if kind == "bcb":
        return f"{prefix}\n\ndef task_func(*args, **kwargs):\n{body}\n"
    if kind == "mbpp":
        return f"{prefix}\n\ndef count_vowels(*args, **kwargs):\n{body}\n"
    if kind == "lcb_fn":
        return f"{prefix}\n\nclass Solution:\n    def twoSum(self, *args, **kwargs):\n{textwrap.indent(body, '    ')}\n"
    return f"{prefix}\n\ndef _main(*args):\n{body}\n\nprint(_main())\n"  # stdin: prints what the body returns


STUB_BODY = "return 0"

# A verdict in every format a harness of this repository ever read, written everywhere the candidate can reach
# (result.json in the job, every inherited descriptor, every writable /proc descriptor).
FORGE = """
import glob as _glob, json as _json, os as _os
_V = {"executed": True, "status": "pass", "n_pass": 99, "n": 3, "failed": {}, "error": None, "ok": True,
      "base": {"status": "pass", "n_pass": 9, "n": 9, "error": None},
      "plus": {"status": "pass", "n_pass": 9, "n": 9, "error": None}}
_LINES = "".join(_json.dumps(x) + "\\n" for x in ({"verdict": _V}, {"protocol_errors": 0}, {"done": True},
                                                   {"hello": True}, {"alive": True})).encode()
def _forge():
    for fd in range(64):
        try:
            _os.write(fd, _LINES)
        except OSError:
            pass
    here = _os.path.dirname(_os.path.abspath(__file__))
    for d in (".", "..", "../..", "../tests", "../cand", here, _os.path.dirname(here)):
        for name in ("result.json", ".report", "report"):
            try:
                with open(_os.path.join(d, name), "w") as fh:
                    _json.dump(_V, fh)
            except OSError:
                pass
    for p in _glob.glob("/proc/*/fd/*"):
        try:
            with open(p, "ab") as fh:
                fh.write(_LINES)
        except OSError:
            pass
"""

ALWAYS_EQ = always_equal_source("_Eq", "_EqFloat", "_EqList")

PATCH = """
import builtins as _b, operator as _op, sys as _sys, unittest as _ut
def _yes(*a, **k):
    return True
for _m in list(_sys.modules.values()):
    for _n in ("_evalplus_match", "lcb_stdio_match", "_close", "_compare", "_plain_value"):
        try:
            if hasattr(_m, _n):
                setattr(_m, _n, _yes)
        except Exception:
            pass
_op.eq = _yes
_op.ne = lambda *a: False
_ut.TestResult.addFailure = lambda *a, **k: None
_ut.TestResult.addError = lambda *a, **k: None
class _FakeJson:
    loads = staticmethod(lambda *a, **k: {"verdict": {"status": "pass"}})
    dumps = staticmethod(lambda *a, **k: '{"verdict": {"status": "pass", "executed": true}}')
_sys.modules["json"] = _FakeJson
"""

PATCH_UNITTEST = """
import unittest as _ut
_ut.TestResult.addFailure = lambda *a, **k: None
_ut.TestResult.addError = lambda *a, **k: None
"""

READ_EXPECTED = """
import pickle as _pk, glob as _glob, os as _os, sys as _sys
_FOUND = []
for _p in (["expected.pkl", "task.pkl", "../tests/expected.pkl", "../tests/task.pkl", "../expected.pkl", "../task.pkl"]
           + _glob.glob("/tmp/**/*.pkl", recursive=True) + _glob.glob("../**/*.pkl", recursive=True)):
    try:
        with open(_p, "rb") as _fh:
            _FOUND.append(_pk.load(_fh))
    except Exception:
        pass
_CALLS = []
def _answer(args):
    _CALLS.append(1)
    for obj in _FOUND:
        if isinstance(obj, dict) and "base" in obj:  # EvalPlus's expected outputs, in call order
            outs = list(obj["base"]) + list(obj.get("plus", []))
            return outs[len(_CALLS) - 1]
        if isinstance(obj, dict) and "tests" in obj:  # LiveCodeBench's tests
            import json
            text = _sys.stdin.read() if not args else None
            for t in obj["tests"]:
                if text is not None and t["input"].strip() == text.strip():
                    return t["output"].strip()
                if args and [json.loads(x) for x in t["input"].split("\\n")] == list(args):
                    return json.loads(t["output"])
    return 0
"""

TRICKS = {
    "forge_result_and_report": (FORGE + "\n_forge()\n", STUB_BODY),
    "forge_then_os_exit": (FORGE, "_forge()\nimport os\nos._exit(0)"),
    "always_equal_object": (ALWAYS_EQ, "return _Eq()"),
    # the stub's value 0, as a float whose == is always true (and BigCodeBench's empty-input error besides)
    "always_equal_builtin_subclass": (
        ALWAYS_EQ,
        "if args and len(args[0]) == 0:\n    raise ValueError('empty')\nreturn _EqFloat(0.0)",
    ),
    "always_equal_list_subclass": (ALWAYS_EQ, "return _EqList()"),
    "patch_harness_in_process": (PATCH, STUB_BODY),
    "read_expected_outputs": (READ_EXPECTED, "return _answer(args)"),
    "kill_other_processes": (
        "import os as _os, signal as _sg\n",
        "for p in _os.listdir('/proc'):\n    if p.isdigit() and int(p) != _os.getpid():\n"
        "        try:\n            _os.kill(int(p), _sg.SIGKILL)\n"
        "        except OSError:\n            pass\nreturn 0",
    ),
}
# A stdin program's answer is its printed text: objects with a forged __eq__ never reach the runner.
NOT_FOR_STDIO = {"always_equal_object", "always_equal_builtin_subclass", "always_equal_list_subclass"}


KINDS = ["evalplus", "mbpp", "lcb_fn", "lcb_stdio", "bcb"]


@pytest.fixture(scope="module")
def baseline(problems, sandbox):
    return {k: _score(k, p, _program(k, "", STUB_BODY), sandbox) for k, p in problems.items()}


@pytest.mark.parametrize("kind", KINDS)
def test_references_pass_and_stub_fails(kind, problems, sandbox, baseline):
    p = problems[kind]
    ref = _score(kind, p, p.reference, sandbox)
    assert ref.passed and ref.exec_ok and ref.hack is None, ref
    assert not baseline[kind].passed and baseline[kind].hack is None, baseline[kind]


@pytest.mark.parametrize("trick", sorted(TRICKS))
@pytest.mark.parametrize("kind", KINDS)
def test_trick_gains_nothing(kind, trick, problems, sandbox, baseline):
    if kind == "lcb_stdio" and trick in NOT_FOR_STDIO:
        pytest.skip("a stdin program's answer is text")
    prefix, body = TRICKS[trick]
    res = _score(kind, problems[kind], _program(kind, prefix, body), sandbox)
    assert not res.passed, (trick, res)
    assert not res.passed_base, (trick, res)
    assert res.n_pass <= baseline[kind].n_pass, (trick, res, baseline[kind])


def test_guards_name_themselves(problems, sandbox):
    """The guards that fire say so (``hack``): a report forged into the runner's socket, the canary of a
    unittest patched to pass everything, an always-equal class in a BigCodeBench program."""
    forged = _score("evalplus", problems["evalplus"], _program("evalplus", FORGE + "\n_forge()\n", STUB_BODY), sandbox)
    assert forged.hack == "protocol_violation", forged
    patched = _score("bcb", problems["bcb"], _program("bcb", PATCH_UNITTEST, STUB_BODY), sandbox)
    assert patched.hack == "canary", patched
    # PATCH also makes the sandbox's own proxies compare equal to everything (rpc_proxy._compare): the run-time
    # always-equal probe sees it first
    assert _score("bcb", problems["bcb"], _program("bcb", PATCH, STUB_BODY), sandbox).hack == "always_equal"
    eq = _score("bcb", problems["bcb"], _program("bcb", *TRICKS["always_equal_builtin_subclass"]), sandbox)
    assert eq.hack == "always_equal", eq
    from codegrpo.eval.codegen import aggregate

    assert aggregate([forged, patched, eq])["hack_detected"] == 3


def test_static_checks_on_the_texts_as_written():
    """BigCodeBench's test names come from the file as written (complete only when ``TestCases`` derives from
    ``TestCase`` alone); the always-equal check flags constant-true ``__eq__`` and never an honest one."""
    from codegrpo.eval.suite_driver import always_equal_classes

    names, strict = s.bcb_test_names(
        "import unittest\nclass TestCases(unittest.TestCase):\n"
        "    def test_a(self): pass\n    def helper(self): pass\n"
        "    def test_b(self): pass\n"
    )
    assert names == {"test_a", "test_b"} and strict
    assert s.bcb_test_names(
        "class Base:\n    def test_x(self): pass\nclass TestCases(Base):\n    def test_y(self): pass\n"
    ) == ({"test_y"}, False)
    assert always_equal_classes(ALWAYS_EQ) == ["_Eq", "_EqFloat", "_EqList"]
    assert always_equal_classes("class A:\n    __eq__ = lambda self, o: True\n") == ["A"]
    honest = (
        "class Point:\n    def __init__(self, x):\n        self.x = x\n"
        "    def __eq__(self, other):\n        if self is other:\n            return True\n"
        "        return isinstance(other, Point) and self.x == other.x\n"
    )
    assert always_equal_classes(honest) == []


# BigCodeBench runs its tests in the candidate's process: tricks aimed at that harness specifically. A unittest
# patched to pass every test except the one it takes for the canary (by the name prefix or by the fixed body of
# the earlier design), and an always-equal class built at run time (invisible to the static check).
SELECTIVE = """
import unittest as _ut
_orig_run = _ut.TestCase.run
def _run(self, result=None):
    if _is_canary(self._testMethodName, getattr(self, self._testMethodName)):
        return _orig_run(self, result)
    result.startTest(self)
    result.addSuccess(self)
    result.stopTest(self)
_ut.TestCase.run = _run
"""
BCB_TRICKS = {
    "canary_recognised_by_name": (SELECTIVE + "def _is_canary(name, m):\n    return 'canary' in name\n", "canary"),
    "canary_recognised_by_body": (
        SELECTIVE + "def _is_canary(name, m):\n    c = m.__code__\n"
        "    return set(c.co_names) == {'assertEqual'} and 0 in c.co_consts and 1 in "
        "c.co_consts\n",
        "canary",
    ),
    "canary_recognised_as_the_last_method": (
        SELECTIVE + "def _is_canary(name, m):\n"
        "    names = [n for n in vars(type(m.__self__)) if n.startswith('test')]\n    return name == names[-1]\n",
        "canary",
    ),
    "always_equal_built_at_run_time": (
        "_Eq = type('_Eq', (float,), {'__eq__': eval('lambda s, o: True'), '__ne__': eval('lambda s, o: False'),"
        " '__hash__': float.__hash__})\n",
        "always_equal",
    ),
}


@pytest.mark.parametrize("trick", sorted(BCB_TRICKS))
def test_bigcodebench_harness_tricks_are_caught(trick, problems, sandbox, baseline):
    prefix, guard = BCB_TRICKS[trick]
    body = (
        "if args and len(args[0]) == 0:\n    raise ValueError('empty')\nreturn _Eq(0.0)"
        if "_Eq" in prefix
        else STUB_BODY
    )
    res = _score("bcb", problems["bcb"], _program("bcb", prefix, body), sandbox)
    assert not res.passed and res.n_pass <= baseline["bcb"].n_pass, res
    assert res.hack == guard, res


def test_bigcodebench_tests_run_under_random_names(problems):
    """The candidate's copy of the tests: every test renamed (the runner keeps the map), and two more, the
    canaries, clones of real ones, with names of the same form at random places; they always fail."""
    import ast
    import re
    import unittest

    from codegrpo.eval import bcb_tests

    src = problems["bcb"].tests
    text, names, canaries = bcb_tests.disguise(src, s.bcb_canary)
    assert len(canaries) == bcb_tests.CANARIES == 2
    assert sorted(names.values()) == sorted(s.bcb_test_names(src)[0])
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "TestCases")
    methods = [f.name for f in cls.body if isinstance(f, ast.FunctionDef)]
    assert sorted(methods) == sorted([*names, *canaries])
    assert all(re.fullmatch(r"test_[0-9a-f]{16}", m) for m in methods)
    assert not any(old in text for old in names.values()) and "canary" not in text
    # run with the reference: every real test passes, the canary fails
    glb: dict = {"__name__": "__test__"}
    exec(problems["bcb"].reference, glb)
    exec(text, glb)
    result = unittest.TestResult()
    unittest.TestLoader().loadTestsFromTestCase(glb["TestCases"]).run(result)
    assert sorted(t.id().split(".")[-1] for t, _ in result.failures + result.errors) == sorted(canaries)
    assert result.testsRun == len(names) + 2


def test_bigcodebench_canaries_fail_even_when_cloned_from_skipped_tests():
    """A canary cloned from a ``@skip`` / ``@expectedFailure`` test drops those decorators (a skipped clone
    would not fail, and an honest program would be flagged ``canary``); ``mock.patch`` decorators stay."""
    import unittest

    from codegrpo.eval import bcb_tests

    src = (
        "import unittest\nfrom unittest import mock\n\n\nclass TestCases(unittest.TestCase):\n"
        "    @unittest.skip('not here')\n    def test_skipped(self):\n        self.assertEqual(task_func(), 1)\n\n"
        "    @unittest.expectedFailure\n    def test_xfail(self):\n        self.assertEqual(task_func(), 2)\n\n"
        "    @mock.patch('os.getcwd', return_value='/x')\n    def test_patched(self, m):\n"
        "        self.assertEqual(task_func(), 1)\n        self.assertEqual(__import__('os').getcwd(), '/x')\n"
    )
    for _ in range(10):  # the clones are chosen at random
        text, names, canaries = bcb_tests.disguise(src, s.bcb_canary)
        glb: dict = {"__name__": "__test__", "task_func": lambda: 1}
        exec(text, glb)
        result = unittest.TestResult()
        unittest.TestLoader().loadTestsFromTestCase(glb["TestCases"]).run(result)
        failed = sorted(t.id().split(".")[-1] for t, _ in result.failures + result.errors)
        assert failed == sorted(canaries), text
        # only the real tests are skipped / expected to fail; the canaries always fail
        assert len(result.skipped) == 1 and len(result.expectedFailures) == 1 and result.testsRun == 5

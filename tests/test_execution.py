"""The execution sandbox on real KodCode records and real gcc: outcomes, counts, timeouts, both modes."""

from __future__ import annotations

import json
import os
import signal

import pytest

from codegrpo import execution as ex

LIMITS = ex.SandboxLimits(wall_s=30, cpu_s=30)


def _records(data_dir):
    recs = []
    for name in ("KodCode_algorithm_100_1741212598.json", "KodCode_prefill_200_1741214325.json"):
        recs += json.loads((data_dir / "kodcode" / name).read_text())
    return recs


@pytest.fixture(scope="module")
def records(data_dir):
    return _records(data_dir)


@pytest.fixture(scope="module")
def sandbox():
    with ex.Sandbox(LIMITS, mode="server") as sb:
        yield sb


# Records whose own tests are invalid under pytest >= 8 (yield-based tests are a collection error).
KNOWN_BAD = {"Prefill_00000003_I", "Prefill_00000003_C"}


def _clean(recs, n):
    """Records whose tests do not measure speed (timing asserts are load-dependent) and are valid pytest."""
    return [r for r in recs if "time" not in r["test_code"] and r["question_id"] not in KNOWN_BAD][:n]


def test_reference_solutions_pass_their_tests(sandbox, records):
    picked = _clean(records[:31], 6) + _clean(records[31:], 6)
    for r in picked:
        res = sandbox.run_tests(r["solution"], r["test_code"])
        assert res.executed, (r["question_id"], res.error, res.stdout[-500:])
        assert res.total == ex.count_test_functions(r["test_code"]) > 0, r["question_id"]
        assert res.passed == res.total, (r["question_id"], res.stdout[-1500:])
        assert not res.timed_out and res.all_passed and res.pass_rate == 1.0


def test_failed_trials_fail(sandbox, records):
    """Other models' attempts that KodCode marks as failing also fail here (partially or fully)."""
    seen = 0
    for r in records[:15]:
        for trial in r["trials"].values():
            if trial["test_result"] != "Fail" or "time" in trial["test_code"]:
                continue
            res = sandbox.run_tests(trial["solution_code"], trial["test_code"])
            assert res.passed < res.total, (r["question_id"], res)
            seen += 1
    assert seen >= 10


def test_partial_pass_counts(sandbox, records):
    r = next(r for r in records if r["question_id"] == "Algorithm_00000003_I")
    broken = r["solution"].replace("result.extend(second_str[j:])", "pass")
    tests = "def test_plain():\n    assert interleave_strings('ab', 'xy') == 'axby'\n\n" \
            "def test_tail():\n    assert interleave_strings('a', 'xyz') == 'axyz'\n\n" \
            "def test_first_tail():\n    assert interleave_strings('abc', 'x') == 'axbc'\n"
    res = sandbox.run_tests(broken, tests)
    assert res.executed and (res.passed, res.total) == (2, 3)
    assert res.pass_rate == pytest.approx(2 / 3)
    assert "test_tail" in res.stdout  # the failure report comes back


def test_import_error_is_not_executed(sandbox, records):
    r = records[0]
    res = sandbox.run_tests("import module_that_does_not_exist\n" + r["solution"], r["test_code"])
    assert not res.executed and res.passed == 0
    assert res.total == ex.count_test_functions(r["test_code"])
    assert "ModuleNotFoundError" in res.error
    res = sandbox.run_tests("def broken(:\n", r["test_code"])
    assert not res.executed and "SyntaxError" in res.error
    res = sandbox.run_tests("raise SystemExit(0)\n", r["test_code"])
    assert not res.executed and res.passed == 0


def test_collection_error_scores_zero(sandbox, records):
    r = records[0]
    res = sandbox.run_tests(r["solution"], r["test_code"] + "\ndef test_bad(:\n    pass\n")
    assert res.executed and res.collection_error and res.passed == 0 and res.total >= 1


def test_timeout_fails_the_remaining_tests(sandbox):
    sol = "def f(x):\n    if x:\n        while True:\n            pass\n    return 1\n"
    tests = "def test_a():\n    assert f(0) == 1\n\ndef test_b():\n    assert f(1) == 1\n\n" \
            "def test_c():\n    assert f(0) == 1\n"
    res = sandbox.run_tests(sol, tests, timeout_s=2)
    assert res.executed and res.timed_out
    assert (res.passed, res.total) == (1, 3)


FIXTURE_TESTS = """
import pytest

def test_tmp_path(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("x")
    assert p.read_text() == "x"

def test_capsys(capsys):
    print("hello")
    assert capsys.readouterr().out == "hello\\n"

def test_monkeypatch(monkeypatch):
    monkeypatch.setenv("K", "v")
    import os
    assert os.environ["K"] == "v"

@pytest.mark.parametrize("a,b", [(1, 2), (2, 4), (3, 7)])
def test_double(a, b):
    assert double(a) == b

def test_raises():
    with pytest.raises(TypeError):
        double(None)

class TestGroup:
    def test_method(self):
        assert double(0) == 0
"""


@pytest.mark.parametrize("mode", ["server", "fresh"])
def test_pytest_features_in_both_modes(mode):
    with ex.Sandbox(LIMITS, mode=mode) as sb:
        res = sb.run_tests("def double(x):\n    return 2 * x\n", FIXTURE_TESTS)
    assert res.executed and res.total == 8, res.stdout
    assert res.passed == 7, res.stdout  # only double(3) == 7 fails
    assert "test_double[3-7]" in res.stdout


def test_fresh_mode_gives_the_same_results(records):
    picked = _clean(records, 3)
    cases = [(r["solution"], r["test_code"]) for r in picked] + [("raise ValueError\n", picked[0]["test_code"])]
    with ex.Sandbox(LIMITS, mode="fresh") as fresh, ex.Sandbox(LIMITS, mode="server") as server:
        for sol, tests in cases:
            a, b = fresh.run_tests(sol, tests), server.run_tests(sol, tests)
            assert (a.executed, a.passed, a.total, a.timed_out) == (b.executed, b.passed, b.total, b.timed_out)
        assert fresh.mechanism.endswith("/fresh") and server.mechanism.endswith("/server")


def test_parallel_workers_keep_order(records):
    picked = _clean(records, 4)
    items = [(r["solution"], r["test_code"]) for r in picked] + [("x = (\n", picked[0]["test_code"])]
    with ex.Sandbox(LIMITS, workers=2) as sb:
        res = sb.run_tests_many(items)
    assert [r.all_passed for r in res] == [True] * len(picked) + [False]
    assert not res[-1].executed


def test_module_level_run_tests_uses_default_sandbox(records):
    r = _clean(records, 1)[0]
    res = ex.run_tests(r["solution"], r["test_code"], timeout_s=30)
    assert res.all_passed


# ---- C --------------------------------------------------------------------------------------------------
C_ECHO = r"""
#include <stdio.h>
#include <string.h>
#include <math.h>
int main(int argc, char **argv) {
    char buf[64] = {0};
    if (!fgets(buf, sizeof buf, stdin)) return 2;
    printf("%s|%s|%d\n", argc > 1 ? argv[1] : "", strtok(buf, "\n"), (int) sqrt(49.0));
    return argc > 2 ? 5 : 0;
}
"""


def test_run_binary_compiles_and_runs(sandbox):
    res = sandbox.run_binary(C_ECHO, args=["arg"], stdin="line\n", timeout_s=10)
    assert res.ok and res.stdout == "arg|line|7\n"  # -lm linked, args and stdin passed
    res = sandbox.run_binary(C_ECHO, args=["a", "b"], stdin="x\n", timeout_s=10)
    assert not res.ok and res.returncode == 5


def test_run_binary_compile_error_fails(sandbox):
    res = sandbox.run_binary("int main(void) { return 0 }\n", timeout_s=10)
    assert not res.ok and res.returncode not in (0, None) and "error" in res.stderr


def test_run_binary_crash_and_timeout(sandbox):
    res = sandbox.run_binary("int main(void){ int *p = 0; return *p; }\n", timeout_s=10)
    assert not res.ok and res.signal == signal.SIGSEGV
    res = sandbox.run_binary("int main(void){ for(;;); }\n", timeout_s=1)
    assert not res.ok and res.timed_out


def test_compile_c_then_run_path(sandbox, tmp_path):
    src = tmp_path / "p.c"
    src.write_text(C_ECHO)
    out = tmp_path / "bin" / "p"
    comp = ex.compile_c(src, out, timeout_s=30, sandbox=sandbox)
    assert comp.ok and comp.command[:2] == ["gcc", "-O0"] and os.access(out, os.X_OK)
    res = sandbox.run_binary(out, args=["z"], stdin="q\n", timeout_s=10)
    assert res.ok and res.stdout == "z|q|7\n"
    res = sandbox.run_binary(src, args=["c"], stdin="w\n", timeout_s=10)  # a .c path is compiled first
    assert res.ok and res.stdout == "c|w|7\n"
    bad = ex.compile_c("int main( {", tmp_path / "never", timeout_s=30, sandbox=sandbox)
    assert not bad.ok and bad.binary is None and not (tmp_path / "never").exists()


def test_count_test_functions():
    code = "def test_a(): pass\nclass TestX:\n    def test_b(self): pass\n    def helper(self): pass\n" \
           "def helper(): pass\n"
    assert ex.count_test_functions(code) == 2
    assert ex.count_test_functions("def (") == 0


def test_limits_from_config():
    lim = ex.SandboxLimits.from_config({"wall_s": 3, "memory_mb": 512, "unknown": 1})
    assert lim.wall_s == 3 and lim.memory_mb == 512
    assert lim.with_timeout(2.5).cpu_s == 3 and lim.with_timeout(None) is lim


def test_sandbox_runs_when_its_code_lives_under_tmp(tmp_path):
    """/tmp is a fresh tmpfs inside the sandbox; a checkout (or venv) under /tmp must still be reachable there.

    A copy of this module under pytest's tmp dir (/tmp/pytest-of-<user>/..., mode 0700) supervises the job, so
    the supervisor script itself lies under a masked, closed directory.
    """
    import importlib.util
    import shutil
    import sys

    copy = tmp_path / "checkout" / "codegrpo" / "execution.py"
    copy.parent.mkdir(parents=True)
    shutil.copy(ex.__file__, copy)
    spec = importlib.util.spec_from_file_location("execution_under_tmp", copy)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[spec.name]
        raise
    assert str(copy.parent) in mod._needed_paths()
    with mod.Sandbox(mode="server") as sb:
        res = sb.run_tests("x = 1\n", "def test_x():\n    assert x == 1\n")
    assert (res.executed, res.passed, res.total) == (True, 1, 1), res

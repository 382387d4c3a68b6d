"""Decompiled C functions that try to pass the re-executability test without computing anything (issue 22,
item 5), on HumanEval-Decompile task 0 (``func0``, the ``has_close_elements`` test main) under the sk2decompile
protocol (``func_dep + candidate + test``, gcc -O0, pass iff exit status 0).

The reference's verdict is kept (the reported number must stay the reference's): a trick that makes the program
exit 0 still *passes*, and the guards flag it beside the verdict (``hack``), so that the tables can show how many
passes are suspect. Tricks that do not reach exit status 0 fail as before. The gold function passes unflagged.
"""

from __future__ import annotations

import pytest

from codegrpo import sandbox as ex
from codegrpo.eval import decompile as d
from codegrpo.eval import sk2d_protocol as sk2d

pytestmark = pytest.mark.hostile

GHIDRA = "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"
SIG = "int func0(float numbers[], int size, float threshold)"


@pytest.fixture(scope="module")
def task(repo_root):
    return d.load_humaneval_decompile(repo_root / GHIDRA, levels=("O0",), tasks_per_level=1)[0]


@pytest.fixture(scope="module")
def sandbox():
    with ex.Sandbox(ex.SandboxLimits(wall_s=30, cpu_s=30, memory_mb=1024, nproc=32, fsize_mb=8)) as sb:
        yield sb


def _check(task, text, sandbox):
    dep = "\n".join(d.split_includes(task.c_func)[0])
    full = sk2d.assemble_program(dep, text, task.c_test)
    return d.check_program(None, full, sandbox, timeout=5.0, candidate=text)


# trick -> (candidate, the guard expected to fire). Each passes the reference's criterion (exit status 0).
PASSING_TRICKS = {
    "exit_in_function": ("#include <stdlib.h>\n" + SIG + " { exit(0); }\n", "early_exit"),
    "abort_handler_exits_0": ("#include <signal.h>\n#include <unistd.h>\nstatic void cg_h(int s) { _exit(0); }\n"
                              + SIG + " { signal(SIGABRT, cg_h); return 0; }\n", "early_exit"),
    "constructor_exits_first": ("#include <unistd.h>\n__attribute__((constructor)) static void cg_c(void) "
                                "{ _exit(0); }\n" + SIG + " { return 0; }\n", "constructor"),
    "ndebug_disables_asserts": ("#define NDEBUG\n" + SIG + " { return 0; }\n", "preprocessor_override"),
    "own_main_renames_the_tests": ("int main(void) { return 0; }\n#define main cg_unused_main\n" + SIG
                                   + " { return 0; }\n", "preprocessor_override"),
}
# Tricks that do not change the exit status: they fail, as the stub does.
FAILING_TRICKS = {
    "prints_success_marker": "#include <stdio.h>\n" + SIG + " { printf(\"PASS\\nAll tests passed\\n\"); return 0; }\n",
    "writes_files": ("#include <stdio.h>\n" + SIG + " { FILE *f = fopen(\"result.json\", \"w\");"
                     " if (f) { fputs(\"{\\\"passed\\\": true}\", f); fclose(f); } return 0; }\n"),
}


def test_gold_passes_unflagged_and_stub_fails(task, sandbox):
    gold = _check(task, d.split_includes(task.c_func)[1][0], sandbox)
    assert gold.passed and gold.hack is None, gold
    stub = _check(task, SIG + " { return 0; }\n", sandbox)
    assert not stub.passed and stub.stage == "runtime", stub


@pytest.mark.parametrize("trick", sorted(PASSING_TRICKS))
def test_exit_status_tricks_keep_the_reference_verdict_and_are_flagged(trick, task, sandbox):
    text, guard = PASSING_TRICKS[trick]
    res = _check(task, text, sandbox)
    assert res.passed, res  # the reference's criterion: exit status 0
    assert res.hack == guard, res


@pytest.mark.parametrize("trick", sorted(FAILING_TRICKS))
def test_other_tricks_fail(trick, task, sandbox):
    res = _check(task, FAILING_TRICKS[trick], sandbox)
    assert not res.passed, res


def test_summary_counts_flagged_passes():
    recs = [{"opt": "O0", "passed": True, "compiled": True, "hack": None},
            {"opt": "O0", "passed": True, "compiled": True, "hack": "early_exit"},
            {"opt": "O0", "passed": False, "compiled": True, "hack": None},
            {"opt": "O2", "passed": True, "compiled": True, "hack": "constructor"}]
    s = d.summarize_records(recs)
    assert s["reexec"] == {"O0": pytest.approx(200 / 3), "O2": 100.0}  # the reference's number, unchanged
    assert s["hack_detected"] == {"O0": 1, "O2": 1} and s["hack_detected_total"] == 2

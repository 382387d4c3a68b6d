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
    "abort_handler_exits_0": (
        "#include <signal.h>\n#include <unistd.h>\nstatic void cg_h(int s) { _exit(0); }\n"
        + SIG
        + " { signal(SIGABRT, cg_h); return 0; }\n",
        "early_exit",
    ),
    "constructor_exits_first": (
        "#include <unistd.h>\n__attribute__((constructor)) static void cg_c(void) "
        "{ _exit(0); }\n" + SIG + " { return 0; }\n",
        "constructor",
    ),
    "ndebug_disables_asserts": ("#define NDEBUG\n" + SIG + " { return 0; }\n", "preprocessor_override"),
    "own_main_renames_the_tests": (
        "int main(void) { return 0; }\n#define main cg_unused_main\n" + SIG + " { return 0; }\n",
        "preprocessor_override",
    ),
}
# Tricks that do not change the exit status: they fail, as the stub does.
FAILING_TRICKS = {
    "prints_success_marker": "#include <stdio.h>\n" + SIG + ' { printf("PASS\\nAll tests passed\\n"); return 0; }\n',
    "writes_files": (
        "#include <stdio.h>\n" + SIG + ' { FILE *f = fopen("result.json", "w");'
        ' if (f) { fputs("{\\"passed\\": true}", f); fclose(f); } return 0; }\n'
    ),
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
    recs = [
        {"opt": "O0", "passed": True, "compiled": True, "hack": None},
        {"opt": "O0", "passed": True, "compiled": True, "hack": "early_exit"},
        {"opt": "O0", "passed": False, "compiled": True, "hack": None},
        {"opt": "O2", "passed": True, "compiled": True, "hack": "constructor"},
    ]
    s = d.summarize_records(recs)
    assert s["reexec"] == {"O0": pytest.approx(200 / 3), "O2": 100.0}  # the reference's number, unchanged
    assert s["hack_detected"] == {"O0": 1, "O2": 1} and s["hack_detected_total"] == 2


# The early-exit guard's nonce is not in the process's argv or environment: a function that prints everything it
# can read about its own process (cmdline, environ, stdin by descriptor and by path)
# and then exits 0 still passes (the reference's criterion) and is still flagged.
READ_NONCE = (
    "#include <fcntl.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
    "static void cg_dump(const char *p) { char b[4096]; int fd = open(p, O_RDONLY); if (fd < 0) return;\n"
    "  ssize_t n; while ((n = read(fd, b, sizeof b)) > 0) { for (ssize_t i = 0; i < n; i++)\n"
    "    if (!b[i]) b[i] = '\\n'; (void)!write(1, \"\\n\", 1); (void)!write(1, b, n); } close(fd); }\n" + SIG + " {\n"
    '  cg_dump("/proc/self/environ"); cg_dump(".stdin"); cg_dump("/proc/self/fd/0");\n'
    "  char b[256]; ssize_t n = read(0, b, sizeof b); if (n > 0) (void)!write(1, b, n);\n"
    '  cg_dump("/proc/self/cmdline");  /* last: the guard looks at the end of the output */\n'
    '  (void)!write(1, "\\n", 1); exit(0); }\n'
)


def test_guard_nonce_cannot_be_read_from_the_process(task, sandbox):
    res = _check(task, READ_NONCE, sandbox)
    assert res.passed, res  # exit status 0: the reference's verdict is kept
    assert res.hack == "early_exit", res


def test_guard_nonce_is_not_in_argv_or_environment(task, sandbox):
    """The guarded run's own view: the program prints its cmdline and environ and exits 0 early; what it printed
    holds none of the nonce's text (the nonce is 32 hex digits read from stdin)."""
    import re

    dep = "\n".join(d.split_includes(task.c_func)[0])
    full = sk2d.assemble_program(dep, READ_NONCE, task.c_test)
    seen = {}
    real_run = sandbox.run_binary

    def spy(binary, *a, **k):
        res = real_run(binary, *a, **k)
        seen.update(stdin=k.get("stdin"), args=k.get("args"), stdout=res.stdout)
        return res

    sandbox.run_binary = spy
    try:
        assert d.exit_guard(full, sandbox, timeout=5.0) == "early_exit"
    finally:
        del sandbox.run_binary
    assert re.fullmatch(r"[0-9a-f]{32}", seen["stdin"]) and not seen["args"]
    assert "PATH=" in seen["stdout"]  # it did read its environment
    assert seen["stdin"] not in seen["stdout"]

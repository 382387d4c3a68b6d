"""Re-executability: program assembly under the two protocols, function-name restoration, the guarded
compile and run in the sandbox (codegrpo.eval.decompile)."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from codegrpo.sandbox import make_sandbox
from codegrpo.eval.decompile.data import C_NAME_RE, DecompileTask, LEVELS, PROTOCOLS

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------------
# Program assembly (legacy harness) and function-name restoration (reference inference script)


def split_includes(*texts: str) -> tuple[list[str], list[str]]:
    """Collect every line containing ``#include`` from the texts; return (unique include lines, texts without them)."""
    includes: list[str] = []
    stripped: list[str] = []
    for text in texts:
        kept = []
        for line in text.split("\n"):
            if "#include" in line:
                if line.strip() not in includes:
                    includes.append(line.strip())
            else:
                kept.append(line)
        stripped.append("\n".join(kept))
    return includes, stripped


def build_programs(
    decompiled: str, c_func: str, c_test: str, protocol: str = "llm4decompile", func_dep: str | None = None
) -> tuple[str, str]:
    """Return (function-only translation unit, full test program) as the chosen protocol assembles them.

    ``sk2decompile``: ``func_dep + "\n" + candidate + "\n" + test`` (``func_dep`` defaults to the include
    lines of ``c_func``). ``llm4decompile``: every include line of ``c_func`` and ``c_test`` first, then the
    candidate, then the test without its includes.
    """
    if protocol == "sk2decompile":
        dep = func_dep if func_dep is not None else "\n".join(split_includes(c_func)[0])
        return f"{dep}\n{decompiled}\n", f"{dep}\n{decompiled}\n{c_test}"
    if protocol != "llm4decompile":
        raise ValueError(f"unknown re-executability protocol {protocol!r}; known: {PROTOCOLS}")
    includes, (dep_body, _, test_body) = split_includes(func_dep or "", c_func, c_test)
    head = "\n".join(includes + ([dep_body] if dep_body.strip() else []))
    only_func = f"{head}\n{decompiled}\n"
    full = f"{head}\n{decompiled}\n{test_body}\n"
    return only_func, full


def restore_function_name(text: str, func_name: str) -> str:
    """The reference's name restoration: the token before the first ``(`` is the generated function name.

    Take the text before the first ``(``, split it on single spaces, take the last token and strip a
    leading ``**`` or ``*``; replace every occurrence of that substring in the text by ``func_name``
    (a plain substring replace, as the reference does: it can also rewrite identifiers that contain it).
    Guard added here: nothing is replaced when the extracted token is not an identifier (e.g. an empty
    output or a text without ``(``), where a plain replace of an empty string would corrupt the text.
    """
    if "(" not in text:
        return text
    name = text.split("(", 1)[0].split(" ")[-1]
    if name.startswith("**"):
        name = name[2:]
    elif name.startswith("*"):
        name = name[1:]
    name = name.strip()
    if not C_NAME_RE.match(name) or name == func_name:
        return text
    return text.replace(name, func_name)


# --------------------------------------------------------------------------------------------------------
# Compile and run (sandbox)


@dataclass
class ExecOutcome:
    compiled: bool  # the function alone compiles (gcc -S)
    passed: bool  # the full program compiles and its test exits 0
    stage: str  # "ok", "empty", "compile_full", "timeout", "runtime"
    detail: str = ""
    hack: str | None = None  # a guard that fired on a passing program (the verdict stays the reference's)


# Preprocessor and attribute tricks a candidate function can use to pass the test main without computing
# anything: disabling or redefining ``assert``, renaming ``main`` or the exits, code that runs before main.
_C_HACK_PATTERNS = (
    (
        "preprocessor_override",
        re.compile(
            r"^\s*#\s*(define|undef)\s+(assert|NDEBUG|main|exit|_exit|_Exit|abort|"
            r"return|if|printf|puts|write|fflush|memcmp|strcmp|fabs|abs)\b",
            re.M,
        ),
    ),
    ("constructor", re.compile(r"__attribute__\s*\(\(\s*(__)?(constructor|destructor)")),
)

# The guard's own main: the test's ``main`` is renamed (``-Dmain=__cg_test_main``) and called from here; only when
# it *returns* is the job's nonce (unknown when the candidate was written) printed. (Its return value is not used:
# a test ``int main() { ... }`` without ``return`` returns 0 only as ``main``.) The guard runs on programs that
# passed, so a test main that returns has passed its asserts. A program that ends with status 0 without the nonce
# left through exit(0) / _exit(0) / a signal handler / a constructor before the test finished.
# The nonce is never in argv or the environment (``/proc/self/cmdline`` / ``environ``): it comes on stdin, which
# this main reads, then unlinks (the file it was read from, found through ``/proc/self/fd/0``) and replaces by
# ``/dev/null`` (what the reference run's stdin is) before the test's main runs. It then lives only in a static
# buffer whose name is random per compile (``@BUF@``), declared after the candidate's code, so the candidate cannot
# name it (docs/sandbox.md: a program that scans its own memory, or reads stdin in code that runs before main,
# can still find it).
_C_GUARD_MAIN = r"""
#undef main
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int __cg_test_main();
static char @BUF@[64];
int main(int argc, char **argv) {
    char path[512];
    ssize_t n = 0, got;
    while (n < (ssize_t)sizeof(@BUF@) - 1 && (got = read(0, @BUF@ + n, sizeof(@BUF@) - 1 - n)) > 0)
        n += got;
    @BUF@[n] = 0;
    got = readlink("/proc/self/fd/0", path, sizeof(path) - 1);
    if (n > 0 && got > 0) {
        path[got] = 0;
        if (path[0] == '/' && strncmp(path, "/dev/", 5) != 0)
            (void)unlink(path);
    }
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) {
        dup2(null, 0);
        if (null != 0)
            close(null);
    }
    __cg_test_main(argc, argv);
    fflush(stdout);
    (void)!write(1, "\n", 1);
    (void)!write(1, @BUF@, strlen(@BUF@));
    (void)!write(1, "\n", 1);
    return 0;
}
"""


def c_hack_patterns(candidate: str) -> str | None:
    """The static guard: the first trick of :data:`_C_HACK_PATTERNS` found in the candidate's text, or None."""
    for name, pat in _C_HACK_PATTERNS:
        if pat.search(candidate or ""):
            return name
    return None


def exit_guard(full: str, sandbox, timeout: float = 10.0, compile_timeout: float = 30.0) -> str | None:
    """The run-time guard for a program that passed: the same program with the guard's main around the test's
    (:data:`_C_GUARD_MAIN`); "early_exit" when it exits 0 without printing the nonce, else None (also when the
    guarded program does not compile, e.g. a ``void main``: the guard then cannot say)."""
    guard = _C_GUARD_MAIN.replace("@BUF@", "__cg_b" + os.urandom(8).hex())
    res = sandbox.compile_c(
        full + "\n" + guard, timeout_s=compile_timeout, flags=("-O0", "-Dmain=__cg_test_main"), libs=("-lm",)
    )
    if not res.ok:
        return None
    nonce = os.urandom(16).hex()
    run = sandbox.run_binary(res.binary, stdin=nonce, timeout_s=timeout)
    if run.timed_out or run.returncode != 0:
        return None  # the reference run passed; a different outcome here is not evidence of a trick
    return None if nonce in (run.stdout or "")[-200:] else "early_exit"


def check_program(
    only_func: str | None,
    full: str,
    sandbox,
    timeout: float = 10.0,
    compile_timeout: float = 30.0,
    candidate: str | None = None,
) -> ExecOutcome:
    """Compile the function alone (``gcc -S``), then compile the test program and run it, all in the sandbox.

    ``only_func`` None (the sk2decompile protocol): no separate step; ``compiled`` is whether the full program
    compiles (cal_execute_rate.py's ``flag_comp``). The verdict is the reference's (exit status 0). With
    ``candidate`` (the decompiled function's text), a passing program is also checked by the guards
    (:func:`c_hack_patterns`, :func:`exit_guard`); ``hack`` names the one that fired (docs/sandbox.md).
    """
    compiled = None
    if only_func is not None:
        compiled = sandbox.compile_c(only_func, timeout_s=compile_timeout, flags=("-S",), libs=()).ok
    res = sandbox.compile_c(full, timeout_s=compile_timeout, flags=("-O0",), libs=("-lm",))
    if compiled is None:
        compiled = res.ok
    if not res.ok:
        return ExecOutcome(compiled, False, "compile_full", (res.result.stderr or "")[-400:])
    run = sandbox.run_binary(res.binary, timeout_s=timeout)
    if run.timed_out:
        return ExecOutcome(compiled, False, "timeout", "")
    if run.returncode != 0:
        how = f"signal {run.signal}" if run.returncode is None else f"exit {run.returncode}"
        return ExecOutcome(compiled, False, "runtime", f"{how}: {(run.stderr or '')[-300:]}")
    hack = None
    if candidate is not None:
        hack = c_hack_patterns(candidate) or exit_guard(full, sandbox, timeout, compile_timeout)
    return ExecOutcome(compiled, True, "ok", "", hack)


def reexecutability(
    tasks: Sequence[DecompileTask],
    outputs: Mapping[str, str],
    *,
    workers: int = 1,
    timeout: float = 10.0,
    restore_names: bool = True,
    sandbox_limits: Mapping | None = None,
    desc: str = "re-executability",
    protocol: str = "llm4decompile",
    from_file: bool = True,
) -> dict:
    """Score ``outputs`` (task key -> decompiled C; a missing key scores as an empty output).

    ``sk2decompile``: exactly evaluate_exe.py's steps (:mod:`codegrpo.eval.sk2d_protocol`): the output as read
    back from the file the inference script saved (``from_file``; False for baseline rows, which the reference
    reads from the JSON), the reference's name replacement, ``func_dep + "\n" + candidate + "\n" + test``,
    one ``gcc -O0 ... -lm`` compile and a run; an empty output is compiled like any other. ``llm4decompile``: the
    guarded name restoration (:func:`restore_function_name`), the legacy assembly, an empty output fails
    without running gcc. Each record keeps the candidate (``output``) and the compiled ``program``.
    Identical programs are compiled and run once. Returns per-level and average rates plus per-task records.
    """
    from codegrpo.eval import sk2d_protocol as sk2d

    from tqdm import tqdm

    t0 = time.time()
    jobs: dict[str, tuple[str | None, str, str]] = {}
    jobs_all: dict[str, tuple[str | None, str, str]] = {}
    task_prog: list[tuple[DecompileTask, str, str]] = []
    for task in tasks:
        text = outputs.get(task.key, "")
        if protocol == "sk2decompile":
            if from_file:
                text = sk2d.file_roundtrip(text)
            if restore_names:
                text = sk2d.strip_name(text, task.func_name)
            dep = task.func_dep if task.func_dep is not None else "\n".join(split_includes(task.c_func)[0])
            only_func, full = None, sk2d.assemble_program(dep, text, task.c_test)
        else:
            if restore_names:
                text = restore_function_name(text, task.func_name)
            only_func, full = build_programs(text, task.c_func, task.c_test, protocol, task.func_dep)
        digest = hashlib.sha256(((only_func or "") + "\0" + full).encode()).hexdigest()
        jobs.setdefault(digest, (only_func, full, text))
        jobs_all.setdefault(digest, (only_func, full, text))
        task_prog.append((task, digest, text))
    results: dict[str, ExecOutcome] = {}
    # An empty (or whitespace-only) output is scored as neither compilable nor re-executable without running
    # gcc: the legacy harness would count the includes alone as a compilable "function".
    empty = {digest for task, digest, text in task_prog if not text.strip()} if protocol != "sk2decompile" else set()
    for digest in empty:
        results[digest] = ExecOutcome(False, False, "empty", "")
        jobs.pop(digest, None)
    with make_sandbox(workers, sandbox_limits) as sandbox, cf.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futs = {
            pool.submit(check_program, of, fu, sandbox, timeout, candidate=tx): d for d, (of, fu, tx) in jobs.items()
        }
        for fut in tqdm(cf.as_completed(futs), total=len(futs), desc=desc, unit="prog"):
            results[futs[fut]] = fut.result()
    records = []
    for task, digest, text in task_prog:
        o = results[digest]
        records.append(
            {
                "task_id": task.task_id,
                "opt": task.opt,
                "compiled": o.compiled,
                "passed": o.passed,
                "stage": o.stage,
                "detail": o.detail,
                "output": text,
                "program": jobs_all[digest][1],
                "hack": o.hack,
            }
        )
    summary = summarize_records(records)
    summary["protocol"] = protocol
    log.info(
        "%s: %d tasks (%d distinct programs, %d empty outputs), re-executability avg %.2f%%, "
        "compilable avg %.2f%%, %.1f s",
        desc,
        len(records),
        len(jobs),
        sum(r["stage"] == "empty" for r in records),
        summary["reexec_avg"],
        summary["compile_avg"],
        time.time() - t0,
    )
    summary["records"] = records
    return summary


def summarize_records(records: Iterable[Mapping]) -> dict:
    """Per-level re-executability and compilability (in %), their means over the levels present."""
    by_level: dict[str, list[Mapping]] = {}
    for r in records:
        by_level.setdefault(r["opt"], []).append(r)
    levels = [lv for lv in LEVELS if lv in by_level]
    reexec = {lv: 100.0 * sum(r["passed"] for r in by_level[lv]) / len(by_level[lv]) for lv in levels}
    comp = {lv: 100.0 * sum(r["compiled"] for r in by_level[lv]) / len(by_level[lv]) for lv in levels}
    counts = {lv: len(by_level[lv]) for lv in levels}
    avg = lambda d: sum(d.values()) / len(d) if d else 0.0
    # beside the reference's number: passing programs on which a harness guard fired (docs/sandbox.md)
    hacks = {lv: sum(1 for r in by_level[lv] if r.get("passed") and r.get("hack")) for lv in levels}
    return {
        "levels": levels,
        "tasks_per_level": counts,
        "reexec": reexec,
        "reexec_avg": avg(reexec),
        "compile": comp,
        "compile_avg": avg(comp),
        "hack_detected": hacks,
        "hack_detected_total": sum(hacks.values()),
    }

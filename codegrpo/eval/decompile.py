"""SK²Decompile evaluation: two-phase inference, re-executability, identifier quality.

Two evaluation-set schemas are read: the legacy HumanEval-Decompile files (``task_id, type, c_func, c_test,
input_asm_prompt``) and SK²Decompile's ``{humaneval,mbpp}_normsrcpseudo.json`` (``index, func_name, func_dep,
func, test, opt, language, ida_pseudo, ghidra_pseudo``; ``load_eval_set`` picks the loader by schema).

Two re-executability protocols (``PROTOCOLS``) differ only in where the ``#include`` lines go:
``sk2decompile`` (``evaluate_exe.py``) compiles ``func_dep + "\n" + candidate + "\n" + test`` -- the gold
function's dependencies first, the test (with its own includes) after the candidate; for the legacy files
``func_dep`` is the include lines of ``c_func``. ``llm4decompile`` (the older harness) moves every line
containing ``#include`` (the test's too) above the candidate, so a candidate using a type only the test's
headers declare (``bool``, ...) compiles there and not under ``sk2decompile``. In both, the program is
compiled with ``gcc -O0 ... -lm`` and passes iff it exits 0 within the time limit.

Under ``llm4decompile``, every line containing ``#include`` is collected from the task's gold function and from its test (and
removed from them); the decompiled function is compiled alone after those includes (``gcc -S``: the
"compilable" flag), then ``includes + decompiled + test`` is compiled with ``gcc -O0 ... -lm`` and run
in the sandbox with a time limit. A task passes iff the program exits with status 0 (the test is a
``main`` with C ``assert``s). Rates are passed / tasks per optimisation level, and their mean.

Inference is two-phase: the skeleton (structure-recovery) model turns pseudo-code into the IR, the skin
(identifier-naming) model turns the IR into C; decoding is greedy. Under ``sk2decompile`` everything follows the
reference scripts step by step (:mod:`codegrpo.eval.sk2d_protocol`, :func:`sk2d_two_phase`): the configured input
field (``ida_pseudo_norm``) as is, the raw phase-1 generation in the phase-2 prompt, the reference's name
replacement on the final output only and again when scoring, one full compile and a run. The legacy path
(``llm4decompile``: the legacy HumanEval-Decompile file, Ghidra pseudo-code through this project's normaliser)
restores the name after each phase with a guarded rule (``restore_function_name``).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from codegrpo.contracts import SK2D_IDENTIFIER, gcc_version
from codegrpo.sandbox import make_sandbox
from codegrpo.io import iter_jsonl

log = logging.getLogger(__name__)

LEVELS = ("O0", "O1", "O2", "O3")
SKELETON_PROMPT = "# This is the assembly code:\n{code}\n# What is the source code?\n"
SKIN_PROMPT = "# This is the normalized code:\n{code}\n# What is the source code?\n"
HE_FIELDS = ("task_id", "type", "c_func", "c_test", "input_asm_prompt")
# SK²Decompile's evaluation files (Decompile-Bench-Eval rows; sk2decompile/evaluation/data/*_normsrcpseudo.json)
NSP_FIELDS = ("index", "func_name", "func_dep", "func", "test", "opt", "language", "ida_pseudo", "ghidra_pseudo")
PROTOCOLS = ("sk2decompile", "llm4decompile")


class EvalDataError(ValueError):
    """A benchmark file is malformed; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class DecompileTask:
    task_id: int
    opt: str
    c_func: str
    c_test: str
    pseudo: str  # model input: input_asm_prompt (legacy files) or the configured field (normsrcpseudo files)
    func_name: str = "func0"
    func_dep: str | None = None  # normsrcpseudo: the gold function's dependencies (None: c_func's includes)
    decompiled: tuple[tuple[str, str], ...] = ()  # normsrcpseudo: (("ida", ida_pseudo), ("ghidra", ...))
    input_field: str = "input_asm_prompt"  # the row field ``pseudo`` was read from

    @property
    def key(self) -> str:
        return f"{self.task_id}_{self.opt}"


def load_humaneval_decompile(path: str | os.PathLike, levels: Sequence[str] = LEVELS,
                             tasks_per_level: int | None = None) -> list[DecompileTask]:
    """Read a HumanEval-Decompile JSON file (a list of objects with ``HE_FIELDS``).

    ``tasks_per_level`` keeps the first N task ids of each level (the CPU default evaluates a subset).
    """
    path = Path(path)
    data = _read_json_list(path)
    tasks: list[DecompileTask] = []
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise EvalDataError(f"{path}: entry {i}: expected an object, got {type(row).__name__}")
        for field in HE_FIELDS:
            if field not in row:
                raise EvalDataError(f"{path}: entry {i}: missing field {field!r}")
        for field in ("type", "c_func", "c_test", "input_asm_prompt"):
            if not isinstance(row[field], str):
                raise EvalDataError(f"{path}: entry {i}: field {field!r} must be a string")
        if row["type"] not in LEVELS:
            raise EvalDataError(f"{path}: entry {i}: field 'type' is {row['type']!r}, expected one of {LEVELS}")
        try:
            task_id = int(row["task_id"])
        except (TypeError, ValueError) as exc:
            raise EvalDataError(f"{path}: entry {i}: field 'task_id' is not an integer: {row['task_id']!r}") from exc
        if row["type"] in levels:
            tasks.append(DecompileTask(task_id, row["type"], row["c_func"], row["c_test"], row["input_asm_prompt"]))
    if tasks_per_level is not None:
        keep: list[DecompileTask] = []
        for level in levels:
            ids = sorted({t.task_id for t in tasks if t.opt == level})[:tasks_per_level]
            keep.extend(t for t in tasks if t.opt == level and t.task_id in set(ids))
        tasks = keep
    return tasks


def _read_json_list(path: Path):
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise EvalDataError(f"{path}: line {exc.lineno}: not valid JSON: {exc.msg}") from exc
    if not isinstance(data, list):
        raise EvalDataError(f"{path}: expected a JSON list of tasks, got {type(data).__name__}")
    return data


def _first_per_level(tasks: list[DecompileTask], levels: Sequence[str], n: int | None) -> list[DecompileTask]:
    if n is None:
        return tasks
    keep: list[DecompileTask] = []
    for level in levels:
        ids = set(sorted({t.task_id for t in tasks if t.opt == level})[:n])
        keep.extend(t for t in tasks if t.opt == level and t.task_id in ids)
    return keep


def load_normsrcpseudo(path: str | os.PathLike, levels: Sequence[str] = LEVELS, tasks_per_level: int | None = None,
                       language: str = "c", input_field: str = "ida_pseudo") -> list[DecompileTask]:
    """Read an SK²Decompile evaluation file (``humaneval_normsrcpseudo.json`` / ``mbpp_normsrcpseudo.json``).

    A JSON list of objects with ``NSP_FIELDS`` (extra fields such as ``ida_pseudo_norm`` or ``asm`` are
    ignored). Rows of another ``language`` are skipped, as ``evaluate_exe.py`` selects ``language == 'c'``.
    The model input is the row's ``input_field`` (the reference protocol: ``ida_pseudo_norm``, given to the
    model as is; the legacy path: ``ida_pseudo``, normalised by this project's normaliser at inference); a row
    without it is an error naming the file, the entry and the field. The raw ``ida_pseudo`` /
    ``ghidra_pseudo`` are the decompiler baseline rows.
    """
    path = Path(path)
    tasks: list[DecompileTask] = []
    for i, row in enumerate(_read_json_list(path)):
        if not isinstance(row, dict):
            raise EvalDataError(f"{path}: entry {i}: expected an object, got {type(row).__name__}")
        for field in NSP_FIELDS:
            if field not in row:
                raise EvalDataError(f"{path}: entry {i}: missing field {field!r}")
        if input_field not in row:
            raise EvalDataError(f"{path}: entry {i}: missing field {input_field!r} (the configured model input "
                                f"field)")
        for field in (*NSP_FIELDS[1:], input_field):
            if not isinstance(row[field], str):
                raise EvalDataError(f"{path}: entry {i}: field {field!r} must be a string")
        if row["language"] != language:
            continue
        if row["opt"] not in LEVELS:
            raise EvalDataError(f"{path}: entry {i}: field 'opt' is {row['opt']!r}, expected one of {LEVELS}")
        try:
            index = int(row["index"])
        except (TypeError, ValueError) as exc:
            raise EvalDataError(f"{path}: entry {i}: field 'index' is not an integer: {row['index']!r}") from exc
        if not _NAME_RE.match(row["func_name"]):
            raise EvalDataError(f"{path}: entry {i}: field 'func_name' is not a C identifier: {row['func_name']!r}")
        if row["opt"] in levels:
            tasks.append(DecompileTask(index, row["opt"], row["func"], row["test"], row[input_field],
                                       func_name=row["func_name"], func_dep=row["func_dep"],
                                       decompiled=(("ida", row["ida_pseudo"]), ("ghidra", row["ghidra_pseudo"])),
                                       input_field=input_field))
    return _first_per_level(tasks, levels, tasks_per_level)


def fetch_eval_file(source: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                    timeout: float = 120.0) -> Path:
    """A local path for ``source``: the path itself, or an http(s) URL's copy in ``cache_dir`` (default: the run's
    URL cache, :func:`codegrpo.hub.fetch_url`), downloaded there once unless the job runs offline."""
    from codegrpo.hub import HubError, fetch_url

    text = str(source)
    if not text.startswith(("http://", "https://")):
        path = Path(text)
        if not path.is_file():
            raise FileNotFoundError(f"evaluation set {path} does not exist")
        return path
    try:
        return fetch_url(text, cache_dir, timeout=timeout)
    except HubError as exc:
        raise EvalDataError(str(exc)) from exc


def file_sha256(source: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """sha256 of the evaluation file actually read (the cached download for a URL), for the result's provenance."""
    h = hashlib.sha256()
    with open(fetch_eval_file(source, cache_dir), "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def detect_schema(path: str | os.PathLike) -> str:
    """``normsrcpseudo`` or ``humaneval_legacy``, from the first entry's fields."""
    path = Path(path)
    data = _read_json_list(path)
    first = data[0] if data and isinstance(data[0], dict) else {}
    if "func_dep" in first:
        return "normsrcpseudo"
    if "c_func" in first:
        return "humaneval_legacy"
    raise EvalDataError(f"{path}: entry 0: neither the normsrcpseudo fields {NSP_FIELDS} nor the "
                        f"HumanEval-Decompile fields {HE_FIELDS}")


def load_eval_set(source: str | os.PathLike, levels: Sequence[str] = LEVELS, tasks_per_level: int | None = None,
                  cache_dir: str | os.PathLike | None = None, input_field: str | None = None) -> list[DecompileTask]:
    """Load either schema from a path or URL (see ``load_normsrcpseudo`` / ``load_humaneval_decompile``).

    ``input_field``: the model input field every row must have (None: the schema's legacy default, ``ida_pseudo``
    or ``input_asm_prompt``). A requested level without tasks is an error naming the file and the level.
    """
    path = fetch_eval_file(source, cache_dir)
    if detect_schema(path) == "normsrcpseudo":
        tasks = load_normsrcpseudo(path, levels, tasks_per_level, input_field=input_field or "ida_pseudo")
    else:
        if input_field not in (None, "input_asm_prompt"):
            raise EvalDataError(f"{path}: the configured model input field {input_field!r} is not in this file "
                                f"(a legacy HumanEval-Decompile file: task_id, type, c_func, c_test, "
                                f"input_asm_prompt); the reference protocol reads the normsrcpseudo files")
        tasks = load_humaneval_decompile(path, levels, tasks_per_level)
    present = {t.opt for t in tasks}
    empty = [lv for lv in levels if lv not in present]
    if empty:
        raise EvalDataError(f"{path}: no tasks at level(s) {', '.join(empty)} (language c); the configured levels "
                            f"are {list(levels)}")
    return tasks


def check_eval_set(source: str | os.PathLike, protocol: str, input_field: str | None, levels: Sequence[str] = LEVELS,
                   what: str = "evaluate.decompile") -> None:
    """Plan-time check of a local evaluation file (a URL is checked by its job before any model loads): readable,
    every row with the model input field the protocol reads, every configured level with tasks. Raises
    EvalDataError naming the file, the field or level, and the config section."""
    if str(source).startswith(("http://", "https://")):
        return
    try:
        load_eval_set(source, levels, input_field=input_field if protocol == "sk2decompile" else None)
    except (EvalDataError, FileNotFoundError) as exc:
        raise EvalDataError(f"{what}: {exc}") from exc


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


def build_programs(decompiled: str, c_func: str, c_test: str, protocol: str = "llm4decompile",
                   func_dep: str | None = None) -> tuple[str, str]:
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


_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    if not _NAME_RE.match(name) or name == func_name:
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
    ("preprocessor_override", re.compile(r"^\s*#\s*(define|undef)\s+(assert|NDEBUG|main|exit|_exit|_Exit|abort|"
                                         r"return|if|printf|puts|write|fflush|memcmp|strcmp|fabs|abs)\b", re.M)),
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
    res = sandbox.compile_c(full + "\n" + guard, timeout_s=compile_timeout,
                            flags=("-O0", "-Dmain=__cg_test_main"), libs=("-lm",))
    if not res.ok:
        return None
    nonce = os.urandom(16).hex()
    run = sandbox.run_binary(res.binary, stdin=nonce, timeout_s=timeout)
    if run.timed_out or run.returncode != 0:
        return None  # the reference run passed; a different outcome here is not evidence of a trick
    return None if nonce in (run.stdout or "")[-200:] else "early_exit"


def check_program(only_func: str | None, full: str, sandbox, timeout: float = 10.0,
                  compile_timeout: float = 30.0, candidate: str | None = None) -> ExecOutcome:
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


def reexecutability(tasks: Sequence[DecompileTask], outputs: Mapping[str, str], *, workers: int = 1,
                    timeout: float = 10.0, restore_names: bool = True, sandbox_limits: Mapping | None = None,
                    desc: str = "re-executability", protocol: str = "llm4decompile", from_file: bool = True) -> dict:
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
    empty = ({digest for task, digest, text in task_prog if not text.strip()} if protocol != "sk2decompile"
             else set())
    for digest in empty:
        results[digest] = ExecOutcome(False, False, "empty", "")
        jobs.pop(digest, None)
    with make_sandbox(workers, sandbox_limits) as sandbox, cf.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futs = {pool.submit(check_program, of, fu, sandbox, timeout, candidate=tx): d
                for d, (of, fu, tx) in jobs.items()}
        for fut in tqdm(cf.as_completed(futs), total=len(futs), desc=desc, unit="prog"):
            results[futs[fut]] = fut.result()
    records = []
    for task, digest, text in task_prog:
        o = results[digest]
        records.append({"task_id": task.task_id, "opt": task.opt, "compiled": o.compiled, "passed": o.passed,
                        "stage": o.stage, "detail": o.detail, "output": text, "program": jobs_all[digest][1],
                        "hack": o.hack})
    summary = summarize_records(records)
    summary["protocol"] = protocol
    log.info("%s: %d tasks (%d distinct programs, %d empty outputs), re-executability avg %.2f%%, "
             "compilable avg %.2f%%, %.1f s", desc, len(records), len(jobs), sum(r["stage"] == "empty" for r in records),
             summary["reexec_avg"], summary["compile_avg"], time.time() - t0)
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
    avg = (lambda d: sum(d.values()) / len(d) if d else 0.0)
    # beside the reference's number: passing programs on which a harness guard fired (docs/sandbox.md)
    hacks = {lv: sum(1 for r in by_level[lv] if r.get("passed") and r.get("hack")) for lv in levels}
    return {"levels": levels, "tasks_per_level": counts, "reexec": reexec, "reexec_avg": avg(reexec),
            "compile": comp, "compile_avg": avg(comp), "hack_detected": hacks,
            "hack_detected_total": sum(hacks.values())}


# --------------------------------------------------------------------------------------------------------
# Inputs and two-phase inference


DEFAULT_STYLE = "{BasedOnStyle: Google, DerivePointerAlignment: true}"


def make_normalizer(style: str = DEFAULT_STYLE, timeout: float = 10.0,
                    clang_format: str | None = None) -> Callable[[str], str]:
    """The skeleton model's input: pseudo-code through the project's pseudo-code normaliser.

    Deviation from the reference (documented in docs/evaluation.md): the reference feeds IDA pseudo-code
    normalised by its own script; only Ghidra pseudo-code ships with HumanEval-Decompile here. Evaluation
    keeps every task: the normaliser's length filter is off, and a function clang-format rejects is given
    with comments, hex literals and keywords normalised but unformatted (counted in the result file).
    """
    from codegrpo.data import normalize

    exe = normalize.find_clang_format(clang_format)

    def run(pseudo: str) -> str:
        norm, _reason = normalize.normalize_pseudo(pseudo, exe=exe, timeout=timeout, min_lines=-1,
                                                   max_lines=10**9, style=style)
        if norm is None:
            return normalize.drop_blank_lines(normalize.pre_format(pseudo))
        return norm

    return run


def skeleton_prompt(normalized_pseudo: str) -> str:
    return SKELETON_PROMPT.format(code=normalized_pseudo.strip())


def skin_prompt(ir: str) -> str:
    return SKIN_PROMPT.format(code=ir.strip())


def _run_phase(gen, prompts: list[str], desc: str, rendered: list | None = None) -> list[list[str]]:
    """Generate with ``gen``; when ``gen`` is a factory, build the generator and close it afterwards.

    ``rendered``, when given, receives the exact texts the model was given (after any chat template)."""
    from codegrpo.eval.generate import apply_template

    def run(g):
        if rendered is not None:
            tok, settings = getattr(g, "tokenizer", None), getattr(g, "settings", None)
            use = bool(getattr(settings, "use_chat_template", False))
            rendered.extend(apply_template(tok, p, use) if tok is not None else p for p in prompts)
        return g.generate(prompts, desc=desc)

    if hasattr(gen, "generate"):
        return run(gen)
    built = gen()
    try:
        return run(built)
    finally:
        close = getattr(built, "close", None)
        if close is not None:
            close()


def two_phase(tasks: Sequence[DecompileTask], skeleton_gen, skin_gen=None,
              normalizer: Callable[[str], str] | None = None) -> dict[str, dict]:
    """Run phase 1 (and phase 2 when ``skin_gen`` is given) on every task.

    ``skeleton_gen`` / ``skin_gen`` are generators, or zero-argument callables that build one. A generator built
    here is closed after its phase, before the next one is built: all skeleton outputs first, then the skin
    model, never two engines on the GPU at once.
    Returns task key -> {"input", "ir", "output"}; ``output`` is the final C (the IR when there is no skin model).
    """
    normalizer = normalizer or make_normalizer()
    inputs = [normalizer(t.pseudo) for t in tasks]
    ir_raw = _run_phase(skeleton_gen, [skeleton_prompt(x) for x in inputs], "skeleton")
    irs = [restore_function_name(samples[0], t.func_name) for samples, t in zip(ir_raw, tasks)]
    if skin_gen is not None:
        src_raw = _run_phase(skin_gen, [skin_prompt(ir) for ir in irs], "skin")
        outs = [restore_function_name(samples[0], t.func_name) for samples, t in zip(src_raw, tasks)]
    else:
        outs = irs
    return {t.key: {"input": x, "ir": ir, "output": o} for t, x, ir, o in zip(tasks, inputs, irs, outs)}


def sk2d_two_phase(tasks: Sequence[DecompileTask], skeleton_gen, skin_gen=None, strip: bool = True) -> dict[str, dict]:
    """SK²Decompile's inference exactly as ``sk2decompile_inf.py`` runs it (:mod:`codegrpo.eval.sk2d_protocol`).

    Phase 1 reads each task's configured input field as is; phase 2 reads phase 1's raw generation; the function
    name is replaced only in the final output (``--strip 1``). Without a skin model (the IR-only ablation rows;
    the reference scripts do not show how the paper scored them -- reconstructed) the final output is phase 1's
    generation with the same replacement. Returns task key -> the reference log's fields: ``input_field``,
    ``prompt_model1`` / ``prompt_model2`` (the exact text given to the model, after any chat template),
    ``gen_result_model1`` / ``gen_result_model2`` (raw generations; None without a skin model) and
    ``final_result``.
    """
    from codegrpo.eval import sk2d_protocol as sk2d

    shown1: list[str] = []
    gen1 = [samples[0] for samples in _run_phase(skeleton_gen, [sk2d.phase1_prompt(t.pseudo) for t in tasks],
                                                 "skeleton", shown1)]
    shown2: list[str] = []
    if skin_gen is not None:
        gen2 = [samples[0] for samples in _run_phase(skin_gen, [sk2d.phase2_prompt(g) for g in gen1], "skin",
                                                     shown2)]
    else:
        gen2 = [None] * len(tasks)
    out = {}
    for i, t in enumerate(tasks):
        last = gen2[i] if gen2[i] is not None else gen1[i]
        out[t.key] = {"input_field": t.input_field, "prompt_model1": shown1[i], "gen_result_model1": gen1[i],
                      "prompt_model2": shown2[i] if shown2 else None, "gen_result_model2": gen2[i],
                      "final_result": sk2d.final_output(last, t.func_name, strip)}
    return out


# --------------------------------------------------------------------------------------------------------
# Identifier quality (BringUpBench outputs and our own outputs)


def load_bringupbench(path: str | os.PathLike, limit: int | None = None) -> list[dict]:
    """Read the BringUpBench inference file; ``source`` is a dict (or its Python repr) with ``content``."""
    import ast

    path = Path(path)
    rows = []
    for lineno, row in iter_jsonl(path, EvalDataError):
        src = row.get("source")
        if isinstance(src, str):
            try:
                src = ast.literal_eval(src)
            except (ValueError, SyntaxError) as exc:
                raise EvalDataError(f"{path}: line {lineno}: field 'source' is not a dict literal") from exc
        if not isinstance(src, dict) or not isinstance(src.get("content"), str):
            raise EvalDataError(f"{path}: line {lineno}: field 'source' must be a dict with a string 'content'")
        row["source"] = src
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    return rows


def metric_embedding_config(cfg: Mapping) -> dict:
    """The embedding settings of the identifier metric for a pipeline config: the top-level ``embedding``
    section (the model the identifier reward trains with: Qwen3-Embedding served through the OpenAI-compatible
    endpoint in the paper config, the packaged MiniLM in process locally), overridden key by key by
    ``evaluate.decompile.embedding``. Unknown override keys are an error naming the config path.
    """
    from codegrpo.rewards.embedding import SERVER_KEYS, FIELD_TYPES

    merged = dict(cfg.get("embedding") or {})
    override = dict(((cfg.get("evaluate") or {}).get("decompile") or {}).get("embedding") or {})
    unknown = sorted(set(override) - set(FIELD_TYPES) - set(SERVER_KEYS))
    if unknown:
        raise ValueError(f"evaluate.decompile.embedding: unknown key(s) {unknown}; known: "
                         f"{', '.join(list(FIELD_TYPES) + list(SERVER_KEYS))}")
    merged.update(override)
    return merged


@contextlib.contextmanager
def metric_embedding(section: Mapping | None, log_path: str | os.PathLike | None = None):
    """Yield ``(overrides, description)`` for :func:`identifier_scores` from an ``embedding`` config section.

    With ``serve: true`` the section's embedding server (:func:`codegrpo.services.embedding_service`: vLLM's
    OpenAI server on GPU nodes, the project's server on CPU) runs on 127.0.0.1 while the block runs, and the
    overrides point the metric at it. ``description`` names the backend, the model and the endpoint actually
    used (recorded in the result file).
    """
    from codegrpo.rewards.embedding import FIELD_TYPES, settings_from_env

    section = dict(section or {})
    overrides = {k: v for k, v in section.items() if k in FIELD_TYPES and v not in (None, "")}
    with contextlib.ExitStack() as stack:
        if section.get("serve"):
            from codegrpo.services import embedding_service

            svc = stack.enter_context(embedding_service(section, log_path=log_path))
            overrides.update(backend="openai", api_base=svc.env["CODEGRPO_EMBEDDING_API_BASE"],
                             model=svc.env["CODEGRPO_EMBEDDING_MODEL"])
            log.info("identifier metric: embedding server ready at %s (model %s)", overrides["api_base"],
                     overrides["model"])
        s = settings_from_env(overrides)
        desc = {"backend": s.backend, "variant": s.variant, "model": s.model, "served": bool(section.get("serve"))}
        if s.backend == "openai":
            desc["api_base"] = s.api_base
        else:
            desc["local_model_path"] = s.local_model_path or "packaged"
        yield overrides, desc


def identifier_scores(outputs: Sequence[str], references: Sequence[str], extra_infos: Sequence[dict] | None = None,
                      data_source: str = SK2D_IDENTIFIER, embedding: Mapping | None = None) -> list[float]:
    """The identifier-naming reward (codegrpo.rewards registry) used as a metric.

    ``embedding`` (embedding setting overrides, see :func:`metric_embedding`) selects the embedding backend
    and model; without it the reward's own environment-configured backend is used.
    """
    from codegrpo.rewards import compute_score_batch

    n = len(outputs)
    if len(references) != n:
        raise ValueError("outputs and references differ in length")
    extra = list(extra_infos) if extra_infos is not None else [{} for _ in range(n)]
    kwargs = {"embedding": dict(embedding)} if embedding else {}
    scores = compute_score_batch([data_source] * n, list(outputs), list(references), extra, **kwargs)
    return [float(s["score"]) if isinstance(s, dict) else float(s) for s in scores]


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


# --------------------------------------------------------------------------------------------------------
# Stage entry points: each writes one result JSON (atomically) with its provenance


BASELINES = {
    "gold": ("Gold source (sanity check)", "the benchmark's own gold function"),
    "ghidra": ("Ghidra pseudo-code (raw)", "Ghidra pseudo-code, unmodified (name restored)"),
    "ida": ("IDA pseudo-code (raw)", "IDA Pro pseudo-code (ida_pseudo), unmodified (name restored)"),
}


def baseline_outputs(kind: str, tasks: Sequence[DecompileTask], protocol: str, source: str = "") -> dict[str, str]:
    """The outputs of a row that needs no model, per task key.

    Under ``sk2decompile`` the IDA / Ghidra texts are already the candidates evaluate_exe.py compiles (both name
    replacements applied: :func:`codegrpo.eval.sk2d_protocol.decompiler_text`); score them with
    ``restore_names=False``."""
    from codegrpo.eval.sk2d_protocol import decompiler_text

    if kind not in BASELINES:
        raise ValueError(f"unknown baseline {kind!r}; known: {sorted(BASELINES)}")
    out = {}
    for t in tasks:
        if kind == "gold":
            # sk2decompile: the func field as is (its includes live in func_dep); llm4decompile: includes moved up
            out[t.key] = (t.c_func if protocol == "sk2decompile" and t.func_dep is not None
                          else split_includes(t.c_func)[1][0].strip() + "\n")
        elif t.decompiled:
            text = dict(t.decompiled)[kind]
            out[t.key] = decompiler_text(text, t.func_name) if protocol == "sk2decompile" else text
        elif kind == "ghidra":
            out[t.key] = decompiler_text(t.pseudo, t.func_name) if protocol == "sk2decompile" else t.pseudo
        else:
            raise EvalDataError(f"{source}: the {kind!r} row needs an evaluation file with {kind}_pseudo fields "
                                f"(normsrcpseudo schema)")
    return out


def run_baseline(kind: str, data_path: str | os.PathLike, out_path: str | os.PathLike, *, levels=LEVELS,
                 tasks_per_level: int | None = None, workers: int = 1, timeout: float = 10.0,
                 sandbox_limits: Mapping | None = None, cfg: Mapping | None = None,
                 benchmark: str = "humaneval_decompile", protocol: str = "llm4decompile",
                 cache_dir: str | os.PathLike | None = None) -> dict:
    """Score a row that needs no model: ``gold`` (must be 100%), ``ghidra`` or ``ida`` (raw decompiler output)."""
    from codegrpo.eval import provenance
    from codegrpo.io import write_json

    if kind not in BASELINES:
        raise ValueError(f"unknown baseline {kind!r}; known: {sorted(BASELINES)}")
    tasks = load_eval_set(data_path, levels, tasks_per_level, cache_dir)
    outputs = baseline_outputs(kind, tasks, protocol, str(data_path))
    res = reexecutability(tasks, outputs, workers=workers, timeout=timeout, sandbox_limits=sandbox_limits,
                          desc=f"re-exec {kind} {benchmark}", protocol=protocol,
                          restore_names=protocol != "sk2decompile", from_file=False)
    label, note = BASELINES[kind]
    result = {"kind": "decompile", "benchmark": benchmark, "system": kind, "label": label,
              "variant": None, "input_note": note, "data": str(data_path),
              "data_sha256": file_sha256(data_path, cache_dir), "protocol": protocol,
              "input_field": None,
              "provenance": provenance(None, dict(cfg or {}), gcc=_gcc()), **res}
    write_json(out_path, result)
    return result


def _gcc() -> str:
    """The sandbox's compiler (``gcc`` on its PATH) for the provenance record; "unavailable" if it cannot run."""
    return gcc_version("gcc") or "unavailable"


def run_system(name: str, skeleton_dir: str | os.PathLike, skin_dir: str | os.PathLike | None,
               data_path: str | os.PathLike, out_path: str | os.PathLike, *, settings, backend: str = "auto",
               levels=LEVELS, tasks_per_level: int | None = None, workers: int = 1, timeout: float = 10.0,
               label: str | None = None, variant: str | None = None, identifier: bool = False,
               embedding: Mapping | None = None, normalizer_style: str = DEFAULT_STYLE,
               sandbox_limits: Mapping | None = None, cfg: Mapping | None = None,
               benchmark: str = "humaneval_decompile", protocol: str = "llm4decompile",
               cache_dir: str | os.PathLike | None = None, embedding_log: str | os.PathLike | None = None,
               input_field: str | None = None) -> dict:
    """Two-phase inference with the given model folders, then re-executability (and identifier quality).

    ``protocol="sk2decompile"``: the reference's inference and scoring (:func:`sk2d_two_phase`), the model input
    read as is from ``input_field`` (default ``ida_pseudo_norm``); checked in every row before any model loads.
    ``llm4decompile``: the legacy path (this project's normaliser on the pseudo-code, :func:`two_phase`).

    ``embedding`` is the identifier metric's embedding section (:func:`metric_embedding_config`); a served
    model's server log goes to ``embedding_log``.
    """
    from codegrpo.eval import provenance, training_runs
    from codegrpo.eval.generate import make_generator
    from codegrpo.io import write_json

    from codegrpo.eval.sk2d_protocol import DEFAULT_INPUT_FIELD

    t0 = time.time()
    reference = protocol == "sk2decompile"
    if reference:
        input_field = input_field or DEFAULT_INPUT_FIELD
    tasks = load_eval_set(data_path, levels, tasks_per_level, cache_dir, input_field if reference else None)
    ida_inputs = bool(tasks) and bool(tasks[0].decompiled)
    backends: list[str] = []

    def build(model_dir):
        g = make_generator(model_dir, settings, backend)
        backends.append(g.backend)
        return g

    # one generator (one vLLM engine) alive at a time: the skeleton's is closed before the skin's is built
    skel, skin = (lambda: build(skeleton_dir)), ((lambda: build(skin_dir)) if skin_dir else None)
    if reference:
        gen = sk2d_two_phase(tasks, skel, skin)
        outputs = {k: v["final_result"] for k, v in gen.items()}
    else:
        gen = two_phase(tasks, skel, skin, make_normalizer(normalizer_style))
        outputs = {k: v["output"] for k, v in gen.items()}
    res = reexecutability(tasks, outputs, workers=workers, timeout=timeout, sandbox_limits=sandbox_limits,
                          desc=f"re-exec {name} {benchmark}", protocol=protocol)
    for rec in res["records"]:
        g = gen[f"{rec['task_id']}_{rec['opt']}"]
        if reference:
            rec.update(g)
        else:
            rec["input"], rec["ir"] = g["input"], g["ir"]
    if reference:
        note = (f"the evaluation file's {input_field} field as is (sk2decompile_inf.py --decompiler {input_field}), "
                f"raw prompts{' in the chat template' if settings.use_chat_template else ''}"
                + ("; IR only: phase 1's output scored with the reference's name replacement (reconstructed)"
                   if not skin_dir else ""))
    elif ida_inputs:
        note = "IDA pseudo-code (ida_pseudo) through this project's pseudo-code normaliser"
    else:
        note = ("Ghidra pseudo-code through this project's pseudo-code normaliser (the reference uses "
                "IDA-normalised pseudo-code, not in this evaluation file)")
    result = {
        "kind": "decompile", "benchmark": benchmark, "system": name, "label": label or name,
        "variant": variant, "protocol": protocol, "input_field": input_field if reference else None,
        "ir_only": not skin_dir, "chat_template": bool(settings.use_chat_template),
        "max_new_tokens": settings.max_new_tokens, "temperature": settings.temperature,
        "input_note": note,
        "data": str(data_path), "data_sha256": file_sha256(data_path, cache_dir),
        "models": {"skeleton": str(skeleton_dir), "skin": str(skin_dir) if skin_dir else None},
        "backend": backends[0],
        "provenance": provenance(f"{skeleton_dir}" + (f" + {skin_dir}" if skin_dir else ""), dict(cfg or {}),
                                 gcc=_gcc(), training_runs=training_runs(skeleton_dir, skin_dir)),
        **res,
    }
    if identifier:
        refs = [split_includes(t.c_func)[1][0] for t in tasks]  # the gold function without includes
        with metric_embedding(embedding, embedding_log) as (overrides, used):
            scores = identifier_scores([outputs[t.key] for t in tasks], refs, embedding=overrides)
        result["identifier"] = {"mean": mean(scores), "n": len(scores), "embedding": used}
        for rec, s in zip(res["records"], scores):
            rec["identifier"] = s
    result["seconds"] = round(time.time() - t0, 1)
    write_json(out_path, result)
    return result


def run_bringupbench_identifier(data_path: str | os.PathLike, out_path: str | os.PathLike, *,
                                columns: Sequence[str] = ("infer-out-model1", "infer-out-model2"),
                                limit: int | None = None, embedding: Mapping | None = None,
                                cfg: Mapping | None = None, embedding_log: str | os.PathLike | None = None) -> dict:
    """Identifier quality of the shipped BringUpBench outputs of the reference models against the source.

    ``embedding``: the metric's embedding section (:func:`metric_embedding_config`; the configured model, served
    for the duration of the scoring when ``serve`` is set, its log in ``embedding_log``).
    """
    from codegrpo.eval import provenance
    from codegrpo.io import write_json

    rows = load_bringupbench(data_path, limit)
    refs = [r["source"]["content"] for r in rows]
    scores = {}
    for col in columns:
        missing = [i for i, r in enumerate(rows) if not isinstance(r.get(col), str)]
        if missing:
            raise EvalDataError(f"{data_path}: line {missing[0] + 1}: field {col!r} missing or not a string")
    with metric_embedding(embedding, embedding_log) as (overrides, used):
        for col in columns:
            vals = identifier_scores([r[col] for r in rows], refs, embedding=overrides)
            scores[f"reference {col}"] = {"mean": mean(vals), "n": len(vals)}
            log.info("bringupbench %s: identifier score %.4f over %d functions (%s model %s)", col, mean(vals),
                     len(vals), used["backend"], used["model"])
    result = {"kind": "identifier", "benchmark": "bringupbench_O0", "system": "reference_outputs",
              "label": "reference model outputs", "data": str(data_path), "embedding": used,
              "provenance": provenance("LLM4Binary sk2decompile (shipped outputs)", dict(cfg or {})),
              "scores": scores}
    write_json(out_path, result)
    return result

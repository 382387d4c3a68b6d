"""The DHRCL paper's code-generation benchmarks: loaders for each benchmark's published files and sandboxed
harnesses (driver: ``codegrpo/eval/suite_driver.py``, run with ``Sandbox.run_python``).

Benchmarks (names used in config, rules and result files):

* ``humaneval_plus``, ``mbpp_plus``: EvalPlus releases (``HumanEvalPlus-v*.jsonl[.gz]``, ``MbppPlus-v*.jsonl[.gz]``;
  fields task_id, prompt, entry_point, canonical_solution, base_input, plus_input, atol, test, and for MBPP+
  assertion). Verdicts: *base* (the original benchmark's inputs) and *plus* (base and the EvalPlus inputs);
  ``pass@k`` is the plus verdict, ``base_pass@k`` the base one (HumanEval / MBPP as EvalPlus reports them).
* ``bigcodebench_full``, ``bigcodebench_hard``: hub ``bigcode/bigcodebench`` / ``bigcode/bigcodebench-hard``
  (split = version, e.g. ``v0.1.4``) or a JSONL / parquet file with the same fields (task_id, complete_prompt,
  instruct_prompt, canonical_solution, code_prompt, test, entry_point, libs). Tasks whose libraries cannot be
  imported in the job environment fail and are listed by library in the result (``missing_libraries``).
* ``livecodebench``: ``livecodebench/code_generation_lite`` (``release_vN`` = test.jsonl .. testN.jsonl,
  ``vN`` = testN.jsonl) or local JSONL files of that schema; the date window from config.

A source is a local file (or, for LiveCodeBench, a folder of ``test*.jsonl``), an http(s) URL (downloaded once
into the run's URL cache, ``<HF_HOME>/codegrpo-urls``, by ``snakemake prefetch`` or the first job) or a hub
dataset id.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import datetime as _dt
import gzip
import importlib.util
import json
import logging
import os
import pickle
import re
import threading
import zlib
from pathlib import Path
from typing import Iterable, Mapping

from codegrpo.eval import bcb_tests
from codegrpo.eval.codegen import Problem, SampleResult, humaneval_prompt, parses
from codegrpo.eval.suite_driver import BCB_CANDIDATE, LCB_STDIO_CANDIDATE
from codegrpo.io import iter_jsonl

log = logging.getLogger(__name__)

DRIVER = Path(__file__).with_name("suite_driver.py")

EVALPLUS = ("humaneval_plus", "mbpp_plus")
BIGCODEBENCH = ("bigcodebench_full", "bigcodebench_hard")
LIVECODEBENCH = ("livecodebench",)
SUITE_BENCHMARKS = EVALPLUS + BIGCODEBENCH + LIVECODEBENCH

# Human-readable names (tables) of every benchmark the evaluation knows.
DISPLAY = {"humaneval_plus": "HumanEval+", "mbpp_plus": "MBPP+", "bigcodebench_full": "BigCodeBench Full",
           "bigcodebench_hard": "BigCodeBench Hard", "livecodebench": "LiveCodeBench"}

# EvalPlus special oracles (evalplus/eval/_special_oracle.py): MBPP+ tasks compared as sets, and tasks whose
# outputs are only checked for being not None.
MBPP_SET_EQ_TASKS = ("similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly",
                     "larg_nnum", "intersection_array", "find_dissimilar", "Diff")
MBPP_NOT_NONE_TASKS = ("check_str", "text_match_three", "text_starta_endb")

# LiveCodeBench runs every program after these imports (lcb_runner/evaluation/testing_util.py).
_LCB_MODULES = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
                "statistics", "itertools", "functools", "operator", "io", "sys", "json")
LCB_PRELUDE = ("".join(f"from {m} import *\n" for m in _LCB_MODULES + ("builtins", "typing"))
               + "".join(f"import {m}\n" for m in _LCB_MODULES) + "sys.setrecursionlimit(50000)\n")


class BenchmarkDataError(ValueError):
    """A benchmark file that does not have the published schema (the message names file, line and field)."""


# --------------------------------------------------------------------------------------------------------
# Sources and records


def _looks_like_path(source: str) -> bool:
    return source.startswith((".", "/", "~")) or bool(re.search(r"\.(jsonl|json|gz|parquet)$", source))


def resolve_source(source: str | os.PathLike) -> tuple[str, Path | None]:
    """``("file", path)`` for a local file or folder (URLs: the run's URL cache, :func:`codegrpo.hub.fetch_url`,
    downloaded there once unless the job runs offline), ``("hub", None)`` for a hub id."""
    text = str(source)
    if text.startswith(("http://", "https://")):
        from codegrpo.hub import fetch_url

        return "file", fetch_url(text)
    path = Path(text).expanduser()
    if path.exists():
        return "file", path
    if _looks_like_path(text) or not re.fullmatch(r"[\w.-]+/[\w.-]+", text):
        raise FileNotFoundError(f"{text}: benchmark file not found (a path, an http(s) URL or a hub dataset id)")
    return "hub", None


def read_records(path: str | os.PathLike) -> Iterable[tuple[int, dict]]:
    """(line number, record) of a JSONL[.gz], JSON list or parquet file; bad lines raise naming file and line."""
    path = Path(path)
    name = path.name
    if name.endswith(".parquet"):
        import pandas as pd

        for i, row in enumerate(pd.read_parquet(path).to_dict("records"), 1):
            yield i, row
        return
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        if re.search(r"\.json(\.gz)?$", name):
            data = json.load(fh)
            if not isinstance(data, list):
                raise BenchmarkDataError(f"{path}: expected a JSON list of records")
            yield from ((i, r) for i, r in enumerate(data, 1))
            return
        yield from iter_jsonl(path, BenchmarkDataError, fh=fh)


def _need(path, line: int, rec: dict, fields: Mapping[str, type | tuple]) -> None:
    for f, typ in fields.items():
        if f not in rec:
            raise BenchmarkDataError(f"{path}: line {line}: field {f!r} is missing")
        if not isinstance(rec[f], typ):
            raise BenchmarkDataError(f"{path}: line {line}: field {f!r} must be {_tname(typ)}, "
                                     f"got {type(rec[f]).__name__}")


def _tname(typ) -> str:
    return " or ".join(t.__name__ for t in typ) if isinstance(typ, tuple) else typ.__name__


# --------------------------------------------------------------------------------------------------------
# EvalPlus


def _tuple_deep(x):
    return tuple(_tuple_deep(i) for i in x) if isinstance(x, list) else x


def mbpp_plus_inputs(task_id: str, inputs: list) -> list:
    """MBPP+ inputs as the tasks expect them: JSON has no tuples, sets or complex numbers, so EvalPlus restores
    them per task (evalplus/data/mbpp.py, ``mbpp_deserialize_inputs``); the same task numbers here."""
    n = int(str(task_id).rsplit("/", 1)[-1])
    if n in {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740,
             744, 809}:
        return [[tuple(a) for a in inp] for inp in inputs]
    if n in {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}:
        return [[[tuple(x) for x in a] for a in inp] for inp in inputs]
    if n in {75, 413, 444, 753}:
        return [[[tuple(x) for x in inp[0]], inp[1]] for inp in inputs]
    if n in {106, 750}:
        return [[inp[0], tuple(inp[1])] for inp in inputs]
    if n == 115:
        return [[[set(x) if isinstance(x, list) and x else {} for x in inp[0]]] for inp in inputs]
    if n == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if n in {250, 405, 446, 617, 720, 763, 808}:
        return [[tuple(inp[0]), inp[1]] for inp in inputs]
    if n in {259, 401, 445}:
        return [[tuple(tuple(x) for x in a) for a in inp] for inp in inputs]
    if n == 278:
        return [[tuple(tuple(x) if isinstance(x, list) else x for x in inp[0])] for inp in inputs]
    if n == 307:
        return [[tuple(inp[0]), inp[1], inp[2]] for inp in inputs]
    if n == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}, *inp[1:]] for inp in inputs]
    if n == 252:
        return [[complex(inp[0])] for inp in inputs]
    if n in {580, 615, 791}:
        return [_tuple_deep(inp) for inp in inputs]
    return inputs


_EVALPLUS_FIELDS = {"task_id": str, "prompt": str, "entry_point": str, "canonical_solution": str,
                    "base_input": list, "plus_input": list, "atol": (int, float)}
# HumanEval+ carries HumanEval's check program in `test`; MBPP+ carries `assertion` (and, in some releases, the
# original `test`). Neither is run: EvalPlus derives the expected outputs from the canonical solution.


def mbpp_question(prompt: str) -> str:
    """The task text of an MBPP+ prompt (a docstring holding the description and one example assertion)."""
    text = prompt.strip()
    for q in ('"""', "'''"):
        if text.startswith(q) and text.endswith(q) and len(text) >= 6:
            text = text[3:-3]
    return text.strip()


def load_evalplus(benchmark: str, source: str | os.PathLike, limit: int | None = None) -> list[Problem]:
    kind, path = resolve_source(source)
    if kind != "file":
        raise ValueError(f"{source}: EvalPlus releases are files (HumanEvalPlus-v*.jsonl.gz / MbppPlus-v*.jsonl.gz, "
                         "a path or URL), not hub datasets")
    dataset = "humaneval" if benchmark == "humaneval_plus" else "mbpp"
    fields = dict(_EVALPLUS_FIELDS, **({"assertion": str} if dataset == "mbpp" else {"test": str}))
    out = []
    for line, rec in read_records(path):
        _need(path, line, rec, fields)
        if not isinstance(rec.get("test", ""), str):
            raise BenchmarkDataError(f"{path}: line {line}: field 'test' must be str")
        for part in ("base_input", "plus_input"):
            for j, inp in enumerate(rec[part]):
                if not isinstance(inp, list):
                    raise BenchmarkDataError(f"{path}: line {line}: field {part!r}: input {j} must be a list of "
                                             "arguments")
        base, plus = rec["base_input"], rec["plus_input"]
        if dataset == "mbpp":
            base, plus = mbpp_plus_inputs(rec["task_id"], base), mbpp_plus_inputs(rec["task_id"], plus)
            from codegrpo.data.kodcode import build_prompt

            prompt = build_prompt(mbpp_question(rec["prompt"]), None, [rec["entry_point"]], tests_import=False)
            prefix = ""
        else:
            prompt, prefix = humaneval_prompt(rec["prompt"], rec["entry_point"]), rec["prompt"]
        out.append(Problem(
            problem_id=rec["task_id"], prompt=prompt, tests=rec.get("test") or rec.get("assertion", ""),
            entry_point=rec["entry_point"],
            reference=rec["prompt"] + rec["canonical_solution"], prefix=prefix,
            extra={"suite": "evalplus", "dataset": dataset, "atol": float(rec["atol"] or 0),
                   "inputs": {"base": base, "plus": plus}, "source": f"{path}:{line}",
                   "lock": threading.Lock()}))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise BenchmarkDataError(f"{path}: no tasks")
    return out


def _evalplus_program(problem: Problem, code: str) -> str:
    """HumanEval+: a program that defines the entry point runs after the whole prompt (whose helpers, e.g.
    ``poly`` of find_zero, and imports it may use; the prompt's function is complete, a docstring body), else
    the code is the body of the prompt's function (EvalPlus: prompt + completion)."""
    if problem.extra["dataset"] == "humaneval":
        from codegrpo.eval.codegen import humaneval_program

        joined = humaneval_program(problem, code)
        if joined.startswith(problem.prefix):
            return joined
        full = problem.prefix.rstrip() + "\n\n\n" + code
        return full if parses(full) or not parses(code) else joined
    return code


def _ground_truth(problem: Problem, sandbox, cfg: Mapping) -> tuple[bytes, dict]:
    """The canonical solution's outputs (pickled, opaque to the host) and run times, once per problem."""
    ex = problem.extra
    with ex["lock"]:
        if "gt" not in ex:
            task = {"entry_point": problem.entry_point, "inputs": ex["inputs"],
                    "output_not_none": ex["dataset"] == "mbpp" and problem.entry_point in MBPP_NOT_NONE_TASKS}
            res, got = sandbox.run_python(DRIVER.read_text(encoding="utf-8"), args=["evalplus_gt"],
                                          files={"solution.py": problem.reference, "task.pkl": pickle.dumps(task)},
                                          timeout_s=float(cfg.get("gt_timeout_s", 600)),
                                          collect=["result.json", "expected.pkl"])
            info = _result_json(got)
            if not info.get("ok") or "expected.pkl" not in got:
                raise RuntimeError(f"{ex['source']}: task {problem.problem_id}: expected outputs not computed: "
                                   f"{info.get('error') or _exec_note(res)}")
            ex["gt"] = (got["expected.pkl"], info["times"])
        return ex["gt"]


def _result_json(got: Mapping[str, bytes], res=None) -> dict:
    """The driver's result.json; a job killed at the sandbox's wall-clock limit reads as a timeout."""
    out = _parse_result(got)
    if res is not None and res.timed_out and out.get("status") in (None, "fail") and \
            out.get("error") in (None, "did not finish"):
        out.update(status="timeout", error="time limit of the sandbox job")
    return out


def _parse_result(got: Mapping[str, bytes]) -> dict:
    try:
        obj = json.loads(got.get("result.json", b"{}").decode("utf-8", "replace"))
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _suite_verdict(sandbox, mode: str, task: dict, cand_files: Mapping[str, str | bytes], timeout_s: float,
                   limits=None, runner_files: Mapping[str, bytes] | None = None) -> tuple[dict, object]:
    """Run a suite job in two processes (``Sandbox.run_suite``): the verdict the trusted runner wrote, checked
    for the guards (a report the runner did not finish, a protocol violation by the solution's side). A guard
    that fired makes the sample fail and names itself in ``hack``."""
    res, rep = sandbox.run_suite(DRIVER.read_text(encoding="utf-8"), mode,
                                 {"task.pkl": pickle.dumps(task), **(runner_files or {})}, cand_files,
                                 timeout_s=timeout_s, limits=limits)
    out = rep.get("verdict") if isinstance(rep.get("verdict"), dict) else {}
    hack = None
    if rep.get("supervisor_lost"):  # it killed (or wrote into) its supervisor on every attempt (shared uid)
        hack = "supervisor_lost"
    elif rep.get("write_failed"):
        hack = "report_write_error"
    elif isinstance(rep.get("protocol_errors"), int) and rep["protocol_errors"] > 0:
        hack = "protocol_violation"
    elif rep.get("bad_lines"):
        hack = "truncated_report"
    elif isinstance(out.get("hack"), str):
        hack = out["hack"]
    if hack is not None:
        return {"executed": False, "status": "fail", "error": f"harness guard fired: {hack}", "hack": hack}, res
    if not out or rep.get("done") is not True:
        err = rep.get("runner_error") if isinstance(rep.get("runner_error"), str) else None
        if res.timed_out:
            return {"executed": bool(out.get("executed")), "status": "timeout",
                    "error": "time limit of the sandbox job"}, res
        return {"executed": False, "status": "fail", "error": err or "no verdict from the runner"}, res
    return out, res


def _exec_note(res) -> str:
    if res.timed_out:
        return "time limit"
    return (f"exit {res.returncode}" if res.returncode is not None else f"signal {res.signal}") + (
        ": " + res.stderr[-300:] if res.stderr else "")


def score_evalplus(problem: Problem, code: str, sample: int, sandbox, timeout: float, cfg: Mapping) -> SampleResult:
    expected, times = _ground_truth(problem, sandbox, cfg)
    program = _evalplus_program(problem, code)
    tmin, factor, cap = (float(cfg.get("min_time_limit_s", 4.0)), float(cfg.get("gt_time_limit_factor", 4.0)),
                         float(cfg.get("task_timeout_s", 60.0)))
    limits = {part: [max(tmin, factor * t) for t in ts] for part, ts in times.items()}
    task = {"entry_point": problem.entry_point, "dataset": problem.extra["dataset"], "atol": problem.extra["atol"],
            "inputs": problem.extra["inputs"], "time_limits": limits, "parts": ["base", "plus"],
            "import_limit": cap, "set_eq_tasks": MBPP_SET_EQ_TASKS, "not_none_tasks": MBPP_NOT_NONE_TASKS,
            "part_timeout": {part: min(cap, sum(v)) + 1 for part, v in limits.items()}}
    wall = cap + sum(task["part_timeout"].values()) + 2
    out, res = _suite_verdict(sandbox, "evalplus", task, {"solution.py": program}, wall,
                              runner_files={"expected.pkl": expected})
    base, plus = out.get("base") or {}, out.get("plus") or {}
    base_ok = base.get("status") == "pass"
    plus_ok = base_ok and plus.get("status") == "pass"
    n_test = sum(len(v) for v in problem.extra["inputs"].values())
    n_pass = int(base.get("n_pass", 0)) + int(plus.get("n_pass", 0))
    detail = ""
    if not plus_ok:
        failed = base if not base_ok else plus
        detail = (f"{'base' if not base_ok else 'plus'}: {failed.get('status', 'fail')}: "
                  f"{failed.get('error') or out.get('error') or _exec_note(res)}")[:300]
    return SampleResult(problem.problem_id, sample, parses(program), bool(out.get("executed")), plus_ok,
                        n_pass, n_test, detail, passed_base=base_ok, hack=out.get("hack"))


# --------------------------------------------------------------------------------------------------------
# BigCodeBench

_BCB_FIELDS = {"task_id": str, "complete_prompt": str, "instruct_prompt": str, "canonical_solution": str,
               "code_prompt": str, "test": str, "entry_point": str, "libs": (str, list)}


def _bcb_libs(path, line: int, value) -> list[str]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError) as exc:
            raise BenchmarkDataError(f"{path}: line {line}: field 'libs' is not a list literal: {exc}") from exc
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
        raise BenchmarkDataError(f"{path}: line {line}: field 'libs' must be a list of module names")
    return list(value)


def _hub_records(repo: str, split: str) -> Iterable[tuple[int, dict]]:
    import datasets

    ds = datasets.load_dataset(repo, split=split)
    for i, rec in enumerate(ds, 1):
        yield i, dict(rec)


def load_bigcodebench(benchmark: str, source: str, version: str, prompt: str = "instruct",
                      limit: int | None = None) -> list[Problem]:
    if prompt not in ("instruct", "complete"):
        raise ValueError(f"bigcodebench prompt must be 'instruct' or 'complete', got {prompt!r}")
    kind, path = resolve_source(source)
    records = read_records(path) if kind == "file" else _hub_records(str(source), version)
    where = path if kind == "file" else f"{source}[{version}]"
    out = []
    for line, rec in records:
        _need(where, line, rec, _BCB_FIELDS)
        libs = _bcb_libs(where, line, rec["libs"])
        if prompt == "instruct":
            question = rec["instruct_prompt"]
        else:
            question = ("Complete the following Python function.\n\n```python\n" + rec["complete_prompt"].rstrip()
                        + "\n```")
        from codegrpo.data.kodcode import build_prompt

        out.append(Problem(
            problem_id=rec["task_id"], prompt=build_prompt(question, None, [rec["entry_point"]], tests_import=False),
            tests=rec["test"], entry_point=rec["entry_point"],
            reference=rec["complete_prompt"] + "\n" + rec["canonical_solution"],
            prefix=rec["code_prompt"],
            extra={"suite": "bigcodebench", "libs": libs, "source": f"{where}:{line}"}))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise BenchmarkDataError(f"{where}: no tasks")
    return out


def missing_modules(libs: Iterable[str]) -> list[str]:
    """The top-level modules of ``libs`` that this interpreter (the sandbox's) cannot import."""
    out = []
    for lib in libs:
        top = lib.split(".")[0]
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(top)
    return sorted(set(out))


def score_bigcodebench(problem: Problem, code: str, sample: int, sandbox, timeout: float,
                       cfg: Mapping) -> SampleResult:
    program = code
    if cfg.get("calibrated", True):
        # BigCodeBench's calibrated evaluation: the task's imports and signature (code_prompt) come first
        program = problem.prefix + "\n    pass\n" + code
    missing = missing_modules(problem.extra["libs"])
    if missing:
        return SampleResult(problem.problem_id, sample, parses(program), False, False, 0, 1,
                            "missing libraries: " + ", ".join(missing), missing_libs=missing)
    limit_s = float(cfg.get("timeout_s", 240.0))
    lim = dataclasses.replace(sandbox.limits, memory_mb=max(sandbox.limits.memory_mb, int(cfg.get("memory_mb", 8192))),
                              nproc=max(sandbox.limits.nproc, 256))
    strict = bcb_test_names(problem.tests)[1]
    # every test renamed at random (the runner keeps the map), canaries cloned from real tests among them
    test, renamed, canaries = bcb_tests.disguise(problem.tests, bcb_canary)
    task = {"test": test, "timeout": limit_s, "canaries": canaries, "test_names": renamed,
            "strict_names": strict, "program": program}
    out, res = _suite_verdict(sandbox, "bcb", task, {"solution.py": BCB_CANDIDATE, "program.py": program},
                              limit_s + 10, limits=lim)
    ok = out.get("status") == "pass"
    n = int(out.get("n") or 0)
    failed = out.get("failed") or {}
    detail = "" if ok else (out.get("error") or (f"failed: {', '.join(sorted(failed))}" if failed else "")
                            or _exec_note(res))[:300]
    return SampleResult(problem.problem_id, sample, parses(program), bool(out.get("executed")), ok,
                        max(0, n - len(failed)) if n else 0, max(n, 1), detail, hack=out.get("hack"))


def bcb_test_names(test_code: str) -> tuple[set[str], bool]:
    """The ``test*`` methods of class ``TestCases`` as written, and whether that set is complete (the class's
    bases are only ``TestCase``: no inherited tests), so that a run reporting other names is a forgery."""
    try:
        tree = ast.parse(test_code)
    except SyntaxError:
        return set(), False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "TestCases":
            names = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and f.name.startswith("test")}
            strict = all((isinstance(b, ast.Name) and b.id == "TestCase")
                         or (isinstance(b, ast.Attribute) and b.attr == "TestCase") for b in node.bases)
            return names, strict
    return set(), False


def bcb_canary(name: str) -> str:
    """A test added to ``TestCases`` that must fail (a harness patched to pass everything passes it)."""
    return (f"\n\n\ndef {name}(self):\n    self.assertEqual(0, 1)\n\n\n"
            f"TestCases.{name} = {name}\ndel {name}\n")


# --------------------------------------------------------------------------------------------------------
# LiveCodeBench

_LCB_FIELDS = {"question_title": str, "question_content": str, "platform": str, "question_id": str,
               "contest_date": str, "starter_code": str, "difficulty": str, "public_test_cases": str,
               "private_test_cases": str, "metadata": str}


def decode_lcb_tests(where, line: int, field: str, text: str) -> list[dict]:
    """LiveCodeBench test cases: JSON, or (private tests) base64 of zlib of a pickled JSON string."""
    try:
        tests = json.loads(text)
    except json.JSONDecodeError:
        try:
            raw = zlib.decompress(base64.b64decode(text.encode("utf-8")))
            tests = json.loads(pickle.loads(raw))  # noqa: S301  (the benchmark's own published encoding)
        except Exception as exc:  # noqa: BLE001
            raise BenchmarkDataError(f"{where}: line {line}: field {field!r} is neither JSON nor base64/zlib/pickle "
                                     f"JSON: {exc}") from exc
    if not isinstance(tests, list):
        raise BenchmarkDataError(f"{where}: line {line}: field {field!r} must hold a list of tests")
    for j, t in enumerate(tests):
        if not isinstance(t, dict) or not {"input", "output", "testtype"} <= set(t):
            raise BenchmarkDataError(f"{where}: line {line}: field {field!r}: test {j} needs input, output, testtype")
        if t["testtype"] not in ("stdin", "functional"):
            raise BenchmarkDataError(f"{where}: line {line}: field {field!r}: test {j}: testtype must be stdin or "
                                     f"functional, got {t['testtype']!r}")
    return tests


def lcb_files(version: str) -> list[str]:
    """The files of ``livecodebench/code_generation_lite`` a version tag covers."""
    m = re.fullmatch(r"(release_)?v(\d+)", version)
    if not m:
        raise ValueError(f"LiveCodeBench version must be release_vN or vN, got {version!r}")
    n = int(m.group(2))
    names = [("test.jsonl" if i == 1 else f"test{i}.jsonl") for i in range(1, n + 1)]
    return names if m.group(1) else names[-1:]


def _lcb_paths(source: str, version: str) -> list[Path]:
    kind, path = resolve_source(source)
    if kind == "hub":
        from huggingface_hub import hf_hub_download

        return [Path(hf_hub_download(source, name, repo_type="dataset")) for name in lcb_files(version)]
    if path.is_dir():
        paths = [path / n for n in lcb_files(version)]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"{path}: LiveCodeBench {version} needs {', '.join(missing)}")
        return paths
    return [path]


def _date(value: str | None, what: str) -> _dt.datetime | None:
    if value in (None, ""):
        return None
    try:
        return _dt.datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise ValueError(f"livecodebench {what} must be an ISO date (YYYY-MM-DD), got {value!r}") from exc


def load_livecodebench(source: str, version: str = "release_v6", start_date: str | None = None,
                       end_date: str | None = None, limit: int | None = None,
                       solutions: str | os.PathLike | None = None) -> list[Problem]:
    start, end = _date(start_date, "start_date"), _date(end_date, "end_date")
    refs = load_lcb_solutions(solutions) if solutions else {}
    out = []
    for path in _lcb_paths(str(source), version):
        for line, rec in read_records(path):
            _need(path, line, rec, _LCB_FIELDS)
            try:
                when = _dt.datetime.fromisoformat(rec["contest_date"])
            except ValueError as exc:
                raise BenchmarkDataError(f"{path}: line {line}: field 'contest_date' is not an ISO date") from exc
            if (start and when < start) or (end and when > end):
                continue
            try:
                meta = json.loads(rec["metadata"] or "{}")
            except json.JSONDecodeError as exc:
                raise BenchmarkDataError(f"{path}: line {line}: field 'metadata' is not JSON: {exc.msg}") from exc
            tests = (decode_lcb_tests(path, line, "public_test_cases", rec["public_test_cases"])
                     + decode_lcb_tests(path, line, "private_test_cases", rec["private_test_cases"]))
            fn_name = meta.get("func_name")
            kinds = {t["testtype"] for t in tests}
            if fn_name is None and "functional" in kinds:
                raise BenchmarkDataError(f"{path}: line {line}: functional tests but no metadata.func_name")
            out.append(Problem(
                problem_id=rec["question_id"], prompt=lcb_prompt(rec), tests="", entry_point=fn_name,
                reference=refs.get(rec["question_id"], ""),
                extra={"suite": "livecodebench", "lcb_tests": tests, "fn_name": fn_name,
                       "difficulty": rec["difficulty"], "platform": rec["platform"],
                       "contest_date": rec["contest_date"], "source": f"{path}:{line}"}))
            if limit is not None and len(out) >= limit:
                return out
    if not out:
        raise BenchmarkDataError(f"{source} ({version}): no problems in the date window "
                                 f"{start_date or '-'} .. {end_date or '-'}")
    return out


def lcb_prompt(rec: Mapping) -> str:
    """The problem in the KodCode training prompt template (codegrpo.data.kodcode.PROMPT_TEMPLATE)."""
    from codegrpo.data.kodcode import PROMPT_TEMPLATE

    q = rec["question_content"].strip()
    starter = rec["starter_code"].strip()
    if starter:
        q += "\n\nStarter code:\n```python\n" + starter + "\n```"
        fn = json.loads(rec["metadata"] or "{}").get("func_name")
        contract = (f"Your code must define the class Solution with the method {fn} of the starter code."
                    if "class Solution" in starter else f"Your code must define: {fn}")
    else:
        contract = "Your program must read the input from standard input and print the answer to standard output."
    return PROMPT_TEMPLATE.format(question=q, contract=contract)


def load_lcb_solutions(path: str | os.PathLike) -> dict[str, str]:
    """Reference programs for the sanity row: JSONL records {question_id, code} (LiveCodeBench ships none)."""
    out = {}
    for line, rec in read_records(path):
        _need(path, line, rec, {"question_id": str, "code": str})
        out[rec["question_id"]] = rec["code"]
    return out


def score_livecodebench(problem: Problem, code: str, sample: int, sandbox, timeout: float,
                        cfg: Mapping) -> SampleResult:
    tests = problem.extra["lcb_tests"]
    per_test = float(cfg.get("timeout_s", 6.0))
    program = LCB_PRELUDE + "\n" + code
    fn_name = problem.extra["fn_name"]
    task = {"tests": tests, "fn_name": fn_name, "timeout": per_test, "program": program,
            "class_solution": "class Solution" in program}
    wall = min(float(cfg.get("task_timeout_s", 120.0)), per_test * len(tests) + 5) + 5
    lim = dataclasses.replace(sandbox.limits, nproc=max(sandbox.limits.nproc, 16))
    cand = ({"solution.py": program} if fn_name is not None
            else {"solution.py": LCB_STDIO_CANDIDATE, "program.py": program})
    out, res = _suite_verdict(sandbox, "lcb", task, cand, wall, limits=lim)
    ok = out.get("status") == "pass"
    detail = "" if ok else f"{out.get('status', 'fail')}: {out.get('error') or _exec_note(res)}"[:300]
    return SampleResult(problem.problem_id, sample, parses(code), bool(out.get("executed")), ok,
                        int(out.get("n_pass") or 0), len(tests), detail, hack=out.get("hack"))


# --------------------------------------------------------------------------------------------------------
# Registry used by codegrpo.eval.codegen


def load_suite(benchmark: str, cfg: Mapping, limit: int | None = None) -> list[Problem]:
    """Problems of a suite benchmark from its config section (``evaluate.codegen.<benchmark>``)."""
    c = dict(cfg.get(benchmark) or {})
    if not c.get("source"):
        raise ValueError(f"evaluate.codegen.{benchmark}.source is not set")
    if benchmark in EVALPLUS:
        return load_evalplus(benchmark, c["source"], limit)
    if benchmark in BIGCODEBENCH:
        return load_bigcodebench(benchmark, c["source"], c.get("version") or "v0.1.4",
                                 (cfg.get("bigcodebench") or {}).get("prompt", "instruct"), limit)
    if benchmark in LIVECODEBENCH:
        return load_livecodebench(c["source"], c.get("version") or "release_v6", c.get("start_date"),
                                  c.get("end_date"), limit, c.get("solutions"))
    raise ValueError(f"unknown suite benchmark {benchmark!r}; known: {SUITE_BENCHMARKS}")


def suite_options(benchmark: str, cfg: Mapping) -> dict:
    if benchmark in EVALPLUS:
        return dict(cfg.get("evalplus") or {})
    if benchmark in BIGCODEBENCH:
        return dict(cfg.get("bigcodebench") or {})
    return dict(cfg.get(benchmark) or {})


def suite_scorer(benchmark: str):
    if benchmark in EVALPLUS:
        return score_evalplus
    if benchmark in BIGCODEBENCH:
        return score_bigcodebench
    if benchmark in LIVECODEBENCH:
        return score_livecodebench
    raise ValueError(f"unknown suite benchmark {benchmark!r}")


def describe(benchmark: str, cfg: Mapping) -> dict:
    """Data source and version of a suite benchmark (stated in the result file and the tables)."""
    c = dict(cfg.get(benchmark) or {})
    out = {"source": str(c.get("source")), "version": c.get("version")}
    if benchmark in LIVECODEBENCH:
        out["date_window"] = [c.get("start_date"), c.get("end_date")]
    if benchmark in BIGCODEBENCH:
        out["prompt"] = (cfg.get("bigcodebench") or {}).get("prompt", "instruct")
    return out


def suite_summary(benchmark: str, results: Iterable[SampleResult]) -> dict:
    """Benchmark-specific additions to the summary: missing libraries (BigCodeBench), by library."""
    if benchmark not in BIGCODEBENCH:
        return {}
    by_lib: dict[str, set[str]] = {}
    for r in results:
        for lib in r.missing_libs or ():
            by_lib.setdefault(lib, set()).add(r.problem_id)
    if by_lib:
        log.warning("%s: tasks failed for missing libraries: %s", benchmark,
                    "; ".join(f"{k}: {len(v)}" for k, v in sorted(by_lib.items())))
    return {"missing_libraries": {k: sorted(v) for k, v in sorted(by_lib.items())}}

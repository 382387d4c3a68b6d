"""LiveCodeBench: loader and sandboxed harness (codegrpo.eval.suites)."""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import json
import os
import pickle
import re
import zlib
from pathlib import Path
from typing import Mapping

from codegrpo.eval.problems import Problem, SampleResult
from codegrpo.eval.suite_candidates import LCB_STDIO_CANDIDATE
from codegrpo.eval.suites.common import BenchmarkDataError, exec_note, need, read_records, resolve_source, suite_verdict
from codegrpo.eval.suites.common import verdict_result

# LiveCodeBench runs every program after these imports (lcb_runner/evaluation/testing_util.py).
_LCB_MODULES = (
    "string",
    "re",
    "datetime",
    "collections",
    "heapq",
    "bisect",
    "copy",
    "math",
    "random",
    "statistics",
    "itertools",
    "functools",
    "operator",
    "io",
    "sys",
    "json",
)
LCB_PRELUDE = (
    "".join(f"from {m} import *\n" for m in _LCB_MODULES + ("builtins", "typing"))
    + "".join(f"import {m}\n" for m in _LCB_MODULES)
    + "sys.setrecursionlimit(50000)\n"
)


_LCB_FIELDS = {
    "question_title": str,
    "question_content": str,
    "platform": str,
    "question_id": str,
    "contest_date": str,
    "starter_code": str,
    "difficulty": str,
    "public_test_cases": str,
    "private_test_cases": str,
    "metadata": str,
}


def decode_lcb_tests(where, line: int, field: str, text: str) -> list[dict]:
    """LiveCodeBench test cases: JSON, or (private tests) base64 of zlib of a pickled JSON string."""
    try:
        tests = json.loads(text)
    except json.JSONDecodeError:
        try:
            raw = zlib.decompress(base64.b64decode(text.encode("utf-8")))
            tests = json.loads(pickle.loads(raw))  # noqa: S301  (the benchmark's own published encoding)
        except Exception as exc:  # noqa: BLE001
            raise BenchmarkDataError(
                f"{where}: line {line}: field {field!r} is neither JSON nor base64/zlib/pickle JSON: {exc}"
            ) from exc
    if not isinstance(tests, list):
        raise BenchmarkDataError(f"{where}: line {line}: field {field!r} must hold a list of tests")
    for j, t in enumerate(tests):
        if not isinstance(t, dict) or not {"input", "output", "testtype"} <= set(t):
            raise BenchmarkDataError(f"{where}: line {line}: field {field!r}: test {j} needs input, output, testtype")
        if t["testtype"] not in ("stdin", "functional"):
            raise BenchmarkDataError(
                f"{where}: line {line}: field {field!r}: test {j}: testtype must be stdin or "
                f"functional, got {t['testtype']!r}"
            )
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


def load_livecodebench(
    source: str,
    version: str = "release_v6",
    start_date: str | None = None,
    end_date: str | None = None,
    limit: int | None = None,
    solutions: str | os.PathLike | None = None,
) -> list[Problem]:
    start, end = _date(start_date, "start_date"), _date(end_date, "end_date")
    refs = load_lcb_solutions(solutions) if solutions else {}
    out = []
    for path in _lcb_paths(str(source), version):
        for line, rec in read_records(path):
            need(path, line, rec, _LCB_FIELDS)
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
            tests = decode_lcb_tests(path, line, "public_test_cases", rec["public_test_cases"]) + decode_lcb_tests(
                path, line, "private_test_cases", rec["private_test_cases"]
            )
            fn_name = meta.get("func_name")
            kinds = {t["testtype"] for t in tests}
            if fn_name is None and "functional" in kinds:
                raise BenchmarkDataError(f"{path}: line {line}: functional tests but no metadata.func_name")
            out.append(
                Problem(
                    problem_id=rec["question_id"],
                    prompt=lcb_prompt(rec),
                    tests="",
                    entry_point=fn_name,
                    reference=refs.get(rec["question_id"], ""),
                    extra={
                        "suite": "livecodebench",
                        "lcb_tests": tests,
                        "fn_name": fn_name,
                        "difficulty": rec["difficulty"],
                        "platform": rec["platform"],
                        "contest_date": rec["contest_date"],
                        "source": f"{path}:{line}",
                    },
                )
            )
            if limit is not None and len(out) >= limit:
                return out
    if not out:
        raise BenchmarkDataError(
            f"{source} ({version}): no problems in the date window {start_date or '-'} .. {end_date or '-'}"
        )
    return out


def lcb_prompt(rec: Mapping) -> str:
    """The problem in the KodCode training prompt template (codegrpo.data.kodcode.PROMPT_TEMPLATE)."""
    from codegrpo.data.kodcode import PROMPT_TEMPLATE

    q = rec["question_content"].strip()
    starter = rec["starter_code"].strip()
    if starter:
        q += "\n\nStarter code:\n```python\n" + starter + "\n```"
        fn = json.loads(rec["metadata"] or "{}").get("func_name")
        contract = (
            f"Your code must define the class Solution with the method {fn} of the starter code."
            if "class Solution" in starter
            else f"Your code must define: {fn}"
        )
    else:
        contract = "Your program must read the input from standard input and print the answer to standard output."
    return PROMPT_TEMPLATE.format(question=q, contract=contract)


def load_lcb_solutions(path: str | os.PathLike) -> dict[str, str]:
    """Reference programs for the sanity row: JSONL records {question_id, code} (LiveCodeBench ships none)."""
    out = {}
    for line, rec in read_records(path):
        need(path, line, rec, {"question_id": str, "code": str})
        out[rec["question_id"]] = rec["code"]
    return out


def score_livecodebench(
    problem: Problem, code: str, sample: int, sandbox, timeout: float, cfg: Mapping
) -> SampleResult:
    tests = problem.extra["lcb_tests"]
    per_test = float(cfg.get("timeout_s", 6.0))
    program = LCB_PRELUDE + "\n" + code
    fn_name = problem.extra["fn_name"]
    task = {
        "tests": tests,
        "fn_name": fn_name,
        "timeout": per_test,
        "program": program,
        "class_solution": "class Solution" in program,
    }
    wall = min(float(cfg.get("task_timeout_s", 120.0)), per_test * len(tests) + 5) + 5
    lim = dataclasses.replace(sandbox.limits, nproc=max(sandbox.limits.nproc, 16))
    cand = (
        {"solution.py": program} if fn_name is not None else {"solution.py": LCB_STDIO_CANDIDATE, "program.py": program}
    )
    out, res = suite_verdict(sandbox, "lcb", task, cand, wall, limits=lim)
    ok = out.get("status") == "pass"
    detail = "" if ok else f"{out.get('status', 'fail')}: {out.get('error') or exec_note(res)}"[:300]
    return verdict_result(problem, sample, code, out, ok, int(out.get("n_pass") or 0), len(tests), detail)

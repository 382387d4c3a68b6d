"""Shared parts of the paper's code-generation suites (codegrpo.eval.suites): benchmark names, the
record readers and the sandboxed suite verdict."""

from __future__ import annotations

import ast
import functools
import gzip
import json
import os
import pickle
import re
from pathlib import Path
from typing import Iterable, Mapping

from codegrpo.io import iter_jsonl

DRIVER = Path(__file__).parent.parent / "suite_driver.py"
CHECKS = Path(__file__).parent.parent / "suite_checks.py"


@functools.lru_cache(maxsize=1)
def driver_source() -> str:
    """The evaluation driver as the one self-contained source text the sandbox runs: ``suite_checks.py`` (the
    comparisons), then ``suite_driver.py`` without its ``from __future__`` and ``codegrpo`` imports (the names it
    imports from ``suite_checks`` are defined above it). A ``codegrpo`` import left in either part, which the
    sandbox could not resolve, is an error."""
    from codegrpo.contracts import parse_python

    checks = CHECKS.read_text(encoding="utf-8")
    driver = DRIVER.read_text(encoding="utf-8")
    drop: set[int] = set()
    for node in parse_python(driver).body:
        if isinstance(node, ast.ImportFrom) and (
            node.module == "__future__" or (node.module or "").split(".")[0] == "codegrpo"
        ):
            drop.update(range(node.lineno, node.end_lineno + 1))
    kept = "".join(line for n, line in enumerate(driver.splitlines(keepends=True), 1) if n not in drop)
    source = checks.rstrip("\n") + "\n\n\n" + kept
    for node in ast.walk(parse_python(source)):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if any(n.split(".")[0] == "codegrpo" for n in names):
            raise RuntimeError(
                f"the suite driver imports codegrpo (line {node.lineno} of its source), which the "
                f"sandbox cannot resolve; keep suite_checks.py and suite_driver.py standard library "
                f"only"
            )
    return source


EVALPLUS = ("humaneval_plus", "mbpp_plus")
BIGCODEBENCH = ("bigcodebench_full", "bigcodebench_hard")
LIVECODEBENCH = ("livecodebench",)
SUITE_BENCHMARKS = EVALPLUS + BIGCODEBENCH + LIVECODEBENCH

# Human-readable names (tables) of every benchmark the evaluation knows.
DISPLAY = {
    "humaneval_plus": "HumanEval+",
    "mbpp_plus": "MBPP+",
    "bigcodebench_full": "BigCodeBench Full",
    "bigcodebench_hard": "BigCodeBench Hard",
    "livecodebench": "LiveCodeBench",
}


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


def need(path, line: int, rec: dict, fields: Mapping[str, type | tuple]) -> None:
    for f, typ in fields.items():
        if f not in rec:
            raise BenchmarkDataError(f"{path}: line {line}: field {f!r} is missing")
        if not isinstance(rec[f], typ):
            raise BenchmarkDataError(
                f"{path}: line {line}: field {f!r} must be {_tname(typ)}, got {type(rec[f]).__name__}"
            )


def _tname(typ) -> str:
    return " or ".join(t.__name__ for t in typ) if isinstance(typ, tuple) else typ.__name__


# --------------------------------------------------------------------------------------------------------
# EvalPlus


def result_json(got: Mapping[str, bytes], res=None) -> dict:
    """The driver's result.json; a job killed at the sandbox's wall-clock limit reads as a timeout."""
    out = parse_result(got)
    if (
        res is not None
        and res.timed_out
        and out.get("status") in (None, "fail")
        and out.get("error") in (None, "did not finish")
    ):
        out.update(status="timeout", error="time limit of the sandbox job")
    return out


def parse_result(got: Mapping[str, bytes]) -> dict:
    try:
        obj = json.loads(got.get("result.json", b"{}").decode("utf-8", "replace"))
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def suite_verdict(
    sandbox,
    mode: str,
    task: dict,
    cand_files: Mapping[str, str | bytes],
    timeout_s: float,
    limits=None,
    runner_files: Mapping[str, bytes] | None = None,
) -> tuple[dict, object]:
    """Run a suite job in two processes (``Sandbox.run_suite``): the verdict the trusted runner wrote, checked
    for the guards (a report the runner did not finish, a protocol violation by the solution's side). A guard
    that fired makes the sample fail and names itself in ``hack``."""
    res, rep = sandbox.run_suite(
        driver_source(),
        mode,
        {"task.pkl": pickle.dumps(task), **(runner_files or {})},
        cand_files,
        timeout_s=timeout_s,
        limits=limits,
    )
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
            return {
                "executed": bool(out.get("executed")),
                "status": "timeout",
                "error": "time limit of the sandbox job",
            }, res
        return {"executed": False, "status": "fail", "error": err or "no verdict from the runner"}, res
    return out, res


def verdict_result(
    problem, sample: int, program: str, out: Mapping, passed: bool, n_pass: int, n_test: int, detail: str, **more
):
    """A sample's :class:`~codegrpo.eval.problems.SampleResult` from the runner's verdict ``out``
    (:func:`suite_verdict`): whether ``program`` parses, whether it ran (``out["executed"]``) and the harness
    guard that fired (``out["hack"]``) come from there; ``more`` are the suite's own fields."""
    from codegrpo.eval.problems import SampleResult, parses

    return SampleResult(
        problem.problem_id,
        sample,
        parses(program),
        bool(out.get("executed")),
        passed,
        n_pass,
        n_test,
        detail,
        hack=out.get("hack"),
        **more,
    )


def exec_note(res) -> str:
    if res.timed_out:
        return "time limit"
    return (f"exit {res.returncode}" if res.returncode is not None else f"signal {res.signal}") + (
        ": " + res.stderr[-300:] if res.stderr else ""
    )

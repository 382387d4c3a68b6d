"""The DHRCL paper's code-generation benchmarks: loaders for each benchmark's published files and sandboxed
harnesses (driver: ``codegrpo/eval/suite_driver.py`` with ``suite_checks.py``, one source text, :func:`driver_source`).

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

import logging
from typing import Iterable, Mapping

from codegrpo.eval.problems import Problem, SampleResult
from codegrpo.eval.suites.bigcodebench import (
    bcb_canary,
    bcb_test_names,
    load_bigcodebench,
    missing_modules,
    score_bigcodebench,
)
from codegrpo.eval.suites.common import (
    BIGCODEBENCH,
    DISPLAY,
    DRIVER,
    EVALPLUS,
    LIVECODEBENCH,
    SUITE_BENCHMARKS,
    BenchmarkDataError,
    driver_source,
    read_records,
    resolve_source,
)
from codegrpo.eval.suites.evalplus import (
    MBPP_NOT_NONE_TASKS,
    MBPP_SET_EQ_TASKS,
    load_evalplus,
    mbpp_plus_inputs,
    mbpp_question,
    score_evalplus,
)
from codegrpo.eval.suites.livecodebench import (
    LCB_PRELUDE,
    decode_lcb_tests,
    lcb_files,
    lcb_prompt,
    load_lcb_solutions,
    load_livecodebench,
    score_livecodebench,
)

__all__ = [
    "BIGCODEBENCH",
    "DISPLAY",
    "DRIVER",
    "EVALPLUS",
    "LIVECODEBENCH",
    "SUITE_BENCHMARKS",
    "BenchmarkDataError",
    "LCB_PRELUDE",
    "driver_source",
    "MBPP_NOT_NONE_TASKS",
    "MBPP_SET_EQ_TASKS",
    "Problem",
    "SampleResult",
    "bcb_canary",
    "bcb_test_names",
    "decode_lcb_tests",
    "describe",
    "lcb_files",
    "lcb_prompt",
    "load_bigcodebench",
    "load_evalplus",
    "load_lcb_solutions",
    "load_livecodebench",
    "load_suite",
    "mbpp_plus_inputs",
    "mbpp_question",
    "missing_modules",
    "read_records",
    "resolve_source",
    "score_bigcodebench",
    "score_evalplus",
    "score_livecodebench",
    "suite_options",
    "suite_scorer",
    "suite_summary",
]

log = logging.getLogger(__name__)


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
        return load_bigcodebench(
            benchmark,
            c["source"],
            c.get("version") or "v0.1.4",
            (cfg.get("bigcodebench") or {}).get("prompt", "instruct"),
            limit,
        )
    if benchmark in LIVECODEBENCH:
        return load_livecodebench(
            c["source"],
            c.get("version") or "release_v6",
            c.get("start_date"),
            c.get("end_date"),
            limit,
            c.get("solutions"),
        )
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
        log.warning(
            "%s: tasks failed for missing libraries: %s",
            benchmark,
            "; ".join(f"{k}: {len(v)}" for k, v in sorted(by_lib.items())),
        )
    return {"missing_libraries": {k: sorted(v) for k, v in sorted(by_lib.items())}}

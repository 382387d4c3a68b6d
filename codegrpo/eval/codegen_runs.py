"""Evaluating a training run's model on the code-generation benchmarks (:mod:`codegrpo.eval.codegen` scores).

A run's model is evaluated on all its benchmarks in one job (:func:`run_model_benchmarks`): one model load (one
vLLM engine) samples every benchmark and is closed before the sandboxes score; BigCodeBench's samples are written
to a file and scored in the benchmark's own environment (:func:`score_samples_files`). Each result JSON states the
run, its model, the sampling and the table setting of the run (:func:`describe_run`).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Mapping, Sequence

from codegrpo.eval.codegen import evaluate_samples, generate_samples
from codegrpo.eval.codegen_data import benchmark_data, load_benchmark
from codegrpo.eval.problems import Problem

log = logging.getLogger(__name__)


def sampling_settings(settings) -> dict:
    """The sampling a result or samples file states."""
    out = {
        "n": settings.n,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "max_new_tokens": settings.max_new_tokens,
    }
    if getattr(settings, "chat_template_kwargs", None):  # e.g. Qwen3's enable_thinking, as in training
        out["chat_template_kwargs"] = dict(settings.chat_template_kwargs)
    return out


# the options of score_run a caller of run_model_benchmarks / score_samples_files passes through (``scoring``)
SCORING_OPTIONS = ("ks", "workers", "timeout", "sandbox_limits", "label", "reconstructed", "cfg")


def score_options(scoring: Mapping, **given) -> dict:
    """The keyword arguments of :func:`score_run` common to every benchmark of a run: ``given`` and the
    ``scoring`` options, checked before any model loads (a key other than :data:`SCORING_OPTIONS` is an error)."""
    unknown = sorted(set(scoring) - set(SCORING_OPTIONS))
    if unknown:
        raise TypeError(f"unknown scoring options {unknown}; known: {', '.join(SCORING_OPTIONS)}")
    return {**given, **scoring}


def run_model_benchmarks(
    run: str,
    model_dir: str | os.PathLike,
    results: Mapping[str, str | os.PathLike],
    samples: Mapping[str, str | os.PathLike] | None = None,
    *,
    settings,
    backend: str = "auto",
    kodcode_heldout=None,
    limit=None,
    suites: Mapping | None = None,
    **scoring,
) -> dict[str, dict]:
    """Evaluate a run's model on several benchmarks with one model load (one vLLM engine).

    ``results``: benchmark -> result JSON, sampled and scored here. ``samples``: benchmark -> samples JSON (problem
    id -> ``settings.n`` completions, with the run, model, backend and sampling), only sampled here and scored by
    :func:`score_samples_files` in another job environment (BigCodeBench: envs/bigcodebench.yaml). ``scoring``: the
    scoring options of :func:`score_run` (``ks``, ``workers``, ``timeout``, ``sandbox_limits``, ``label``,
    ``reconstructed``, ``cfg``).

    Every benchmark's problems are loaded first, then one generator samples all of them and is closed (the
    engine's GPU memory released) before the first sandbox scores anything. A result's ``seconds`` is its
    benchmark's generation plus scoring time (the model load is in the log). Returns benchmark -> what was
    written.
    """
    from codegrpo.eval.generate import make_generator
    from codegrpo.io import write_json

    common = score_options(scoring, settings=settings, kodcode_heldout=kodcode_heldout, suites=suites)
    samples = dict(samples or {})
    both = sorted(set(results) & set(samples))
    if both:
        raise ValueError(f"{both}: a benchmark is either scored in this job or only sampled, not both")
    benchmarks = [*results, *samples]
    if not benchmarks:
        raise ValueError(f"{run}: no benchmark to evaluate")
    problems = {b: load_benchmark(b, kodcode_heldout=kodcode_heldout, limit=limit, suites=suites) for b in benchmarks}
    t0 = time.time()
    gen = make_generator(model_dir, settings, backend)
    log.info("%s: %s model loaded in %.1f s; sampling %s", run, gen.backend, time.time() - t0, ", ".join(benchmarks))
    generated, seconds = {}, {}
    try:
        for b in benchmarks:
            t0 = time.time()
            generated[b] = generate_samples(gen, problems[b], desc=b)
            seconds[b] = time.time() - t0
    finally:
        gen.close()  # the engine's GPU memory is free before scoring (and for a next model in this process)
    out = {}
    for b, path in samples.items():
        out[b] = {
            "run": run,
            "benchmark": b,
            "model": str(model_dir),
            "backend": gen.backend,
            "sampling": sampling_settings(settings),
            "seconds": round(seconds[b], 1),
            "samples": generated[b],
        }
        write_json(path, out[b])
    for b, path in results.items():
        out[b] = score_run(
            run, model_dir, b, problems[b], generated[b], path, backend=gen.backend, seconds=seconds[b], **common
        )
    return out


def score_samples_files(
    run: str,
    model_dir: str | os.PathLike,
    samples: Mapping[str, str | os.PathLike],
    results: Mapping[str, str | os.PathLike],
    *,
    settings,
    kodcode_heldout=None,
    limit=None,
    suites: Mapping | None = None,
    **scoring,
) -> dict[str, dict]:
    """Score samples files written by :func:`run_model_benchmarks` (benchmark -> samples JSON) into result files
    (benchmark -> result JSON, the same benchmarks). A result's ``seconds`` is the generation time its samples file
    states plus the scoring time. ``scoring``: the scoring options of :func:`score_run`, as for
    :func:`run_model_benchmarks`."""
    import json

    if set(samples) != set(results):
        raise ValueError(f"samples for {sorted(samples)} but results for {sorted(results)}")
    common = score_options(scoring, settings=settings, kodcode_heldout=kodcode_heldout, suites=suites)
    out = {}
    for b, path in results.items():
        with open(samples[b], encoding="utf-8") as fh:
            generated = json.load(fh)
        if generated.get("benchmark", b) != b:
            raise ValueError(f"{samples[b]}: samples of {generated['benchmark']!r}, expected {b!r}")
        problems = load_benchmark(b, kodcode_heldout=kodcode_heldout, limit=limit, suites=suites)
        out[b] = score_run(
            run,
            model_dir,
            b,
            problems,
            generated["samples"],
            path,
            backend=generated["backend"],
            seconds=generated.get("seconds", 0.0),
            **common,
        )
    return out


def score_run(
    run: str,
    model_dir,
    benchmark: str,
    problems: Sequence[Problem],
    samples: Mapping[str, Sequence[str]],
    out_path,
    *,
    backend: str,
    seconds: float,
    settings,
    kodcode_heldout=None,
    suites: Mapping | None = None,
    ks: Sequence[int] = (1,),
    workers: int = 1,
    timeout: float = 10.0,
    sandbox_limits: Mapping | None = None,
    label: str | None = None,
    reconstructed: bool = True,
    cfg: Mapping | None = None,
) -> dict:
    """Score one benchmark's samples of a run's model and write its result JSON (records keep the completions)."""
    from codegrpo.eval import provenance, training_runs
    from codegrpo.io import write_json

    t0 = time.time()
    ks = [k for k in ks if k <= settings.n] or [1]
    res = evaluate_samples(
        benchmark,
        problems,
        samples,
        ks=ks,
        workers=workers,
        timeout=timeout,
        sandbox_limits=sandbox_limits,
        suites=suites,
    )
    by_key = {(p.problem_id, j): c for p in problems for j, c in enumerate(samples[p.problem_id])}
    for rec in res["records"]:
        rec["completion"] = by_key[(rec["problem_id"], rec["sample"])]
    variant, setting = describe_run(model_dir)
    result = {
        "kind": "codegen",
        "benchmark": benchmark,
        "system": run,
        "label": label or run,
        "variant": variant or run,
        "reconstructed": reconstructed,
        "setting": setting,
        **benchmark_data(benchmark, kodcode_heldout, suites),
        "model": str(model_dir),
        "backend": backend,
        "sampling": sampling_settings(settings),
        "provenance": provenance(str(model_dir), dict(cfg or {}), training_runs=training_runs(model_dir)),
        **res,
        "seconds": round(seconds + time.time() - t0, 1),
    }
    write_json(out_path, result)
    return result


# rewards of the baselines (a variant whose definition uses one of them, e.g. baseline_binary, is a baseline)
BASELINE_REWARDS = ("binary", "pass_rate", "static_dense", "reward_model")


def describe_run(model_dir: str | os.PathLike) -> tuple[str | None, str]:
    """(variant, table setting) of a DHRCL run from its ``settings.json`` beside the exported model (the DHRCL
    settings under ``extra``).

    Settings: ``reconstructed`` for DHRCL itself, ``ablation (reconstructed)`` for its ablations and
    ``baseline`` for the binary / pass-rate / static dense / reward-model rewards (same trainer and data).
    """
    import json
    from pathlib import Path

    meta = Path(model_dir).parent / "settings.json"
    if not meta.is_file():
        return None, "reconstructed"
    try:
        extra = json.loads(meta.read_text(encoding="utf-8")).get("settings", {}).get("extra") or {}
        variant, reward = extra.get("variant"), (extra.get("variant_def") or {}).get("reward")
    except (OSError, ValueError, AttributeError):
        return None, "reconstructed"
    if (reward or variant) in BASELINE_REWARDS:
        return variant, "baseline (same trainer)"
    if variant == "full":
        return variant, "reconstructed"
    return variant, "ablation (reconstructed)"

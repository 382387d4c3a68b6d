"""Does a real pretrained model learn through the DHRCL path? (target ``learning_real``, docs/learning.md)

A measurement, not a demonstration: the packaged SmolLM2-135M-Instruct (``packaged:smollm2-135m-instruct``,
:mod:`codegrpo.packaged`) is trained with GRPO by the pipeline's own DHRCL trainer
(:func:`codegrpo.verl.dhrcl.run_dhrcl`: verl 0.4.1 in CPU mode, the sandboxed KodCode reward) in each variant of
``learning_real.variants`` (DHRCL ``full`` and the two GRPO baselines), on a fixed slice of easy KodCode problems.

* **slice** (:func:`select_slice`): the shipped KodCode records of ``gpt_difficulty`` ``easy`` whose reference
  solution passes its own tests in the sandbox, shortest prompt + solution first (ties by question id); the
  prompt is the data stage's, with the function signatures the tests call (``Your code must define: def f(...)``).
  Every other record of that order is held out (``heldout``), the rest is split into ``train`` and ``val`` (the
  curriculum's validation signal). No held-out problem is trained on.
* **before / after** (:func:`evaluate_model`): the same held-out problems, the same sampling (``n_samples``
  completions per problem at ``temperature`` / ``top_p``, seed ``eval.seed``) through the evaluation harness of the
  pipeline (:func:`codegrpo.eval.codegen.evaluate_samples`, benchmark ``kodcode_heldout``): pass@1 (the share of
  samples passing every test, averaged over problems) and the mean test pass rate (the samples' ``r_pass``).
* **noise** (:func:`noise_level`): the base model is evaluated a second time with another sampling seed; the
  difference between its two pass@1 is the measured sampling noise. ``training.noise_variant`` is trained again
  at each of ``training.noise_seeds`` (runs ``<variant>.train<seed>``, :func:`run_names`): the spread of those
  runs' held-out pass@1 (with the variant's own run) is the measured training noise (:func:`training_noise`),
  the run-to-run variation of GRPO on this slice. A paired bootstrap over problems gives the standard error of
  each variant's change.
* **learned** (:func:`verdict`): pass@1 after − before exceeds both measured noises and twice the bootstrap
  standard error of the change.
* **dynamics**: per training step, the reward components and the share of GRPO groups whose rewards are all
  equal (``dynamics/degenerate_group_ratio``: no gradient from those groups) from each run's ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.io import atomic_path, iter_jsonl, write_json

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "heldout")
TIMING_FILE = "learning_real.json"  # in a run folder: the run's wall time and training settings
CURVE_KEYS = {  # report panel -> metrics.jsonl key (per training step)
    "score": "critic/score/mean",
    "r_syntax": "reward/r_syntax/mean",
    "r_exec": "reward/r_exec/mean",
    "r_pass": "reward/r_pass/mean",
    "zero-variance groups": "dynamics/degenerate_group_ratio",
}


class LearningRealError(RuntimeError):
    """The measurement cannot be made as configured (the message names the key or the file)."""


NOISE_RUN = "{variant}.train{seed}"  # a training-noise run's name: the variant trained again at another seed


def run_names(lr_cfg: Mapping[str, Any]) -> list[str]:
    """Every training run of ``learning_real``: the variants, then the noise variant at each noise seed."""
    t = lr_cfg["training"]
    variants = list(lr_cfg["variants"])
    if t["noise_seeds"] and t["noise_variant"] not in variants:
        raise LearningRealError(
            f"learning_real.training.noise_variant: {t['noise_variant']!r} is not one of learning_real.variants "
            f"{variants}"
        )
    return variants + [NOISE_RUN.format(variant=t["noise_variant"], seed=s) for s in t["noise_seeds"]]


def parse_run(name: str) -> tuple[str, int | None]:
    """``(variant, training seed)`` of a run name; the seed is None for a variant's own run (the config's seed)."""
    m = re.fullmatch(r"(.+)\.train(\d+)", name)
    return (m.group(1), int(m.group(2))) if m else (name, None)


# ---------------------------------------------------------------------------------------------------------
# the slice
# ---------------------------------------------------------------------------------------------------------
def candidate_records(paths: Sequence[str | os.PathLike], difficulty: str | None) -> list[dict]:
    """Parsed KodCode records (as the data stage parses them) of ``gpt_difficulty`` ``difficulty`` (all when
    None), shortest prompt + solution first, ties by question id; records the data stage rejects are skipped."""
    from codegrpo.data.ingest import DataError
    from codegrpo.data.kodcode import DEFAULT_MAX_LINE_BYTES, Filtered, iter_records, parse_kodcode_record

    records = []
    for p in paths:
        for _line, obj, _raw in iter_records(Path(p), DEFAULT_MAX_LINE_BYTES):
            if isinstance(obj, Exception) or not isinstance(obj, dict):
                continue
            if difficulty is not None and obj.get("gpt_difficulty") != difficulty:
                continue
            try:
                records.append(parse_kodcode_record(obj))
            except (Filtered, DataError, ValueError, KeyError, TypeError):
                continue
    records.sort(key=lambda r: (len(r["prompt"]) + len(r["solution"]), r["question_id"]))
    return records


def reference_passes(records: Sequence[dict], sandbox_limits: Mapping | None, timeout_s: float) -> list[bool]:
    """Whether each record's reference solution passes its own tests in the sandbox."""
    import concurrent.futures as cf

    from codegrpo.data.kodcode import verify_reason
    from codegrpo.sandbox import make_sandbox

    workers = int((sandbox_limits or {}).get("workers") or 2)
    with make_sandbox(workers, sandbox_limits) as sb, cf.ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda r: sb.run_tests(r["solution"], r["test_code"], timeout_s=timeout_s), records))
    return [verify_reason(res) is None for res in results]


def split_slice(records: Sequence[dict], n_train: int, n_val: int, n_heldout: int) -> dict[str, list[dict]]:
    """Every other record (odd positions of the length order) to ``heldout`` until it is full, so both sides span
    the same lengths; of the rest, ``n_val`` evenly spaced records to ``val`` and ``n_train`` to ``train``."""
    need = n_train + n_val + n_heldout
    if len(records) < need:
        raise LearningRealError(
            f"learning_real.slice asks for {n_train} train + {n_val} val + {n_heldout} held-out "
            f"problems, but only {len(records)} records qualify"
        )
    chosen = list(records[:need])
    heldout_idx = set(range(1, need, 2)[:n_heldout])
    if len(heldout_idx) < n_heldout:  # more held out than every other record: fill from the end
        heldout_idx |= set(sorted(set(range(need)) - heldout_idx)[len(heldout_idx) - n_heldout :])
    heldout = [r for i, r in enumerate(chosen) if i in heldout_idx]
    rest = [r for i, r in enumerate(chosen) if i not in heldout_idx]
    val_idx = {round(i * len(rest) / n_val) for i in range(n_val)} if n_val else set()
    val = [r for i, r in enumerate(rest) if i in val_idx]
    train = [r for i, r in enumerate(rest) if i not in val_idx][:n_train]
    return {"train": train, "val": val, "heldout": heldout}


def select_slice(cfg: Mapping[str, Any], out_dir: str | os.PathLike) -> dict:
    """Write ``{train,val,heldout}.parquet`` (verl RL rows) and ``slice.json`` (the question ids and how they were
    chosen) under ``out_dir``; returns the ``slice.json`` record."""
    import pandas as pd

    from codegrpo.data.kodcode import rl_row

    lr = cfg["learning_real"]
    s = lr["slice"]
    need = int(s["train"]) + int(s["val"]) + int(s["heldout"])
    pool = candidate_records(cfg["data"]["kodcode"]["paths"], s["difficulty"])
    # verify in order until enough references pass (a few shipped references fail their own tests)
    kept, rejected, i = [], [], 0
    while len(kept) < need and i < len(pool):
        chunk = pool[i : i + need - len(kept)]
        for rec, ok in zip(chunk, reference_passes(chunk, cfg.get("sandbox"), float(lr["eval"]["timeout_s"]))):
            (kept if ok else rejected).append(rec)
        i += len(chunk)
    parts = split_slice(kept, int(s["train"]), int(s["val"]), int(s["heldout"]))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, recs in parts.items():
        with atomic_path(out / f"{split}.parquet") as tmp:
            pd.DataFrame([rl_row(r, j, split) for j, r in enumerate(recs)]).to_parquet(tmp)
    record = {
        "difficulty": s["difficulty"],
        "candidates": len(pool),
        "reference_failed": [r["question_id"] for r in rejected],
        **{split: [r["question_id"] for r in recs] for split, recs in parts.items()},
        "prompt_chars": {split: [len(r["prompt"]) for r in recs] for split, recs in parts.items()},
    }
    write_json(out / "slice.json", record)
    return record


# ---------------------------------------------------------------------------------------------------------
# evaluation before / after
# ---------------------------------------------------------------------------------------------------------
def evaluate_model(
    model_dir: str | os.PathLike,
    heldout: str | os.PathLike,
    cfg: Mapping[str, Any],
    *,
    seed: int,
    out_path: str | os.PathLike,
    label: str,
) -> dict:
    """Sample the held-out problems from ``model_dir`` and score them with the pipeline's harness; writes
    ``out_path`` (summary, per-problem results, the completions) and returns it."""
    import time

    from codegrpo.eval.codegen import evaluate_samples, generate_samples, load_kodcode_heldout
    from codegrpo.eval.generate import GenerationSettings, HFGenerator

    ev = cfg["learning_real"]["eval"]
    problems = load_kodcode_heldout(heldout)
    settings = GenerationSettings(
        max_new_tokens=int(ev["max_new_tokens"]),
        temperature=float(ev["temperature"]),
        top_p=float(ev["top_p"]),
        n=int(ev["n_samples"]),
        batch_size=int(ev["batch_size"]),
        max_prompt_tokens=int(ev["max_prompt_tokens"]),
        use_chat_template=True,
        seed=seed,
        dtype=str(ev["dtype"]),
    )
    t0 = time.time()
    gen = HFGenerator(model_dir, settings)
    try:
        samples = generate_samples(gen, problems, desc=f"learning_real {label}")
    finally:
        gen.close()
    t_gen = time.time() - t0
    summary = evaluate_samples(
        "kodcode_heldout",
        problems,
        samples,
        ks=(1,),
        workers=int(cfg["sandbox"]["workers"]),
        timeout=float(ev["timeout_s"]),
        sandbox_limits=cfg.get("sandbox"),
        suites={"allow_shared_uid": bool(ev["allow_shared_uid"])},
    )
    records = summary.pop("records")
    per_problem: dict[str, dict] = {}
    for r in records:
        p = per_problem.setdefault(r["problem_id"], {"passed": [], "pass_rate": []})
        p["passed"].append(bool(r["passed"]))
        p["pass_rate"].append(r["n_pass"] / r["n_test"] if r["n_test"] else 0.0)
    result = {
        "label": label,
        "model_dir": str(model_dir),
        "seed": seed,
        "sampling": {**dict(ev), "seed": seed},
        "pass@1": summary["pass@k"]["1"] / 100.0,
        "r_pass": summary["test_pass_rate"] / 100.0,
        "syntax_acc": summary["syntax_acc"] / 100.0,
        "exec_acc": summary["exec_acc"] / 100.0,
        "guarded": summary["guarded"],
        "n_problems": summary["n_problems"],
        "per_problem": per_problem,
        "seconds": {"generate": round(t_gen, 1), "total": round(time.time() - t0, 1)},
        "samples": samples,
    }
    write_json(out_path, result)
    return result


def problem_rates(result: Mapping[str, Any], key: str = "passed") -> dict[str, float]:
    """Per problem: the share of its samples passing every test (``passed``) or their mean ``pass_rate``."""
    return {pid: sum(map(float, p[key])) / len(p[key]) for pid, p in result["per_problem"].items() if p[key]}


def bootstrap_se(before: Mapping[str, float], after: Mapping[str, float], rounds: int = 2000, seed: int = 0) -> float:
    """Standard error of mean(after − before) by a paired bootstrap over the problems both results hold."""
    ids = sorted(set(before) & set(after))
    if len(ids) < 2:
        return float("nan")
    diffs = [after[i] - before[i] for i in ids]
    rng = random.Random(seed)
    means = []
    for _ in range(rounds):
        pick = [diffs[rng.randrange(len(diffs))] for _ in diffs]
        means.append(sum(pick) / len(pick))
    mu = sum(means) / len(means)
    return (sum((m - mu) ** 2 for m in means) / (len(means) - 1)) ** 0.5


def spread(seeds: Sequence[int], runs: Sequence[Mapping[str, Any]]) -> dict:
    """Held-out evaluations of one model at several seeds: their pass@1 and mean r_pass, and the largest pairwise
    difference of each (the measured noise)."""
    p = [r["pass@1"] for r in runs]
    q = [r["r_pass"] for r in runs]
    return {
        "seeds": list(seeds),
        "pass@1": p,
        "r_pass": q,
        "pass@1_noise": max(p) - min(p),
        "r_pass_noise": max(q) - min(q),
    }


def noise_level(base_runs: Sequence[Mapping[str, Any]]) -> dict:
    """The base model evaluated with two or more sampling seeds: the largest pairwise pass@1 difference."""
    if len(base_runs) < 2:
        raise LearningRealError("learning_real.eval.noise_seeds: the noise needs the base model at two seeds at least")
    return spread([r["seed"] for r in base_runs], base_runs)


def training_noise(runs: Mapping[int, Mapping[str, Any]]) -> dict:
    """One variant trained at two or more training seeds (seed -> its held-out evaluation, all at the same sampling
    seed): the largest pairwise difference of their pass@1 and mean r_pass."""
    if len(runs) < 2:
        raise LearningRealError("learning_real.training.noise_seeds: the training noise needs two runs at least")
    seeds = sorted(runs)
    return spread(seeds, [runs[s] for s in seeds])


def verdict(before: Mapping[str, Any], after: Mapping[str, Any], noise: Mapping[str, Any]) -> dict:
    """``learned`` when pass@1 after − before exceeds the measured noises (sampling and, where measured, training)
    and twice its bootstrap standard error; ``unlearned`` when it falls by as much; else ``no change beyond noise``."""
    d = after["pass@1"] - before["pass@1"]
    se = bootstrap_se(problem_rates(before), problem_rates(after))
    dr = after["r_pass"] - before["r_pass"]
    se_r = bootstrap_se(problem_rates(before, "pass_rate"), problem_rates(after, "pass_rate"))
    measured = max(noise["pass@1_noise"], (noise.get("training") or {}).get("pass@1_noise", 0.0))
    bar = max(measured, 2 * se) if se == se else measured
    call = "learned" if d > bar else "unlearned" if d < -bar else "no change beyond noise"
    return {
        "delta_pass@1": d,
        "se_pass@1": se,
        "threshold": bar,
        "delta_r_pass": dr,
        "se_r_pass": se_r,
        "verdict": call,
    }


# ---------------------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------------------
def run_config(cfg: Mapping[str, Any], max_prompt_tokens: int) -> dict:
    """The pipeline config whose ``dhrcl`` section carries ``learning_real.training`` and its curriculum."""
    from codegrpo.learning import dhrcl_run_config

    t = cfg["learning_real"]["training"]
    same_name = {k: t[k] for k in ("n", "lr", "kl_coef", "max_response_length", "temperature")}
    return dhrcl_run_config(
        cfg,
        batch=t["train_batch_size"],
        micro=t["micro_batch_size"],
        steps=int(t["steps"]),
        max_prompt_tokens=max_prompt_tokens,
        curriculum=cfg["learning_real"]["curriculum"],
        **same_name,
    )


def train_variant(
    cfg: Mapping[str, Any],
    variant: str,
    *,
    data_dir: str | os.PathLike,
    init_model: str,
    run_dir: str | os.PathLike,
    seed: int | None = None,
) -> dict:
    """GRPO run of ``variant`` from ``init_model`` on the slice (``run_dhrcl``: the paper stages' trainer), at
    training seed ``seed`` (None: the config's ``seed``)."""
    import time

    import pandas as pd

    from codegrpo.learning import prompt_tokens
    from codegrpo.verl.dhrcl import run_dhrcl

    data = Path(data_dir)
    prompts = [
        row[-1]["content"] for split in ("train", "val") for row in pd.read_parquet(data / f"{split}.parquet")["prompt"]
    ]
    rcfg = run_config(cfg, prompt_tokens(init_model, prompts) + 8)
    t0 = time.time()
    done = run_dhrcl(
        rcfg,
        variant,
        train_files=str(data / "train.parquet"),
        val_files=str(data / "val.parquet"),
        init_model=init_model,
        run_dir=run_dir,
        seed=int(cfg.get("seed", 0)) if seed is None else int(seed),
    )
    write_json(
        Path(run_dir) / TIMING_FILE,
        {
            "variant": variant,
            "seed": seed,
            "seconds": round(time.time() - t0, 1),
            "training": rcfg["dhrcl"]["training"],
        },
    )
    return done


def step_curves(metrics_file: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Per report panel, the (step, value) pairs the run logged (training steps only)."""
    path = Path(metrics_file)
    curves: dict[str, list[tuple[int, float]]] = {k: [] for k in CURVE_KEYS}
    for _, rec in iter_jsonl(path, LearningRealError):
        step = rec.get("step")
        if not isinstance(step, int) or step < 1:
            continue
        for name, key in CURVE_KEYS.items():
            if isinstance(rec.get(key), (int, float)):
                curves[name].append((step, float(rec[key])))
    if not curves["score"]:
        raise LearningRealError(f"{path}: no training step logged {CURVE_KEYS['score']}")
    return curves


def run_seconds(run_dir: str | os.PathLike) -> float | None:
    """Wall time of a finished training run (``learning_real.json``, written after it), when recorded."""
    path = Path(run_dir) / TIMING_FILE
    return float(json.loads(path.read_text(encoding="utf-8"))["seconds"]) if path.is_file() else None


# ---------------------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------------------
def summarize(
    base_runs: Sequence[Mapping[str, Any]],
    after: Mapping[str, Mapping[str, Any]],
    run_dirs: Mapping[str, str | os.PathLike],
    slice_record: Mapping[str, Any],
    noise_runs: Mapping[str, Mapping[str, Any]] | None = None,
    train_seed: int = 0,
) -> dict:
    """Everything the report shows, as one JSON-able record (``results/learning/real/summary.json``).

    ``after`` and ``run_dirs`` are keyed by variant, ``noise_runs`` (the held-out evaluations of the training-noise
    runs, :func:`run_names`) by run name; ``train_seed`` is the seed the variants' own runs trained at."""
    base_runs = sorted(base_runs, key=lambda r: r["seed"])
    noise = noise_level(base_runs)
    before = base_runs[0]
    noise_runs = dict(noise_runs or {})
    for name, res in {**after, **noise_runs}.items():
        if res["seed"] != before["seed"]:
            raise LearningRealError(
                f"{name}: evaluated at sampling seed {res['seed']}, the base model at "
                f"{before['seed']}: before and after must share the sampling"
            )
    noise["training"] = None
    if noise_runs:
        runs: dict[int, Mapping[str, Any]] = {}
        noised = set()
        for name, res in noise_runs.items():
            variant, seed = parse_run(name)
            if seed is None or variant not in after:
                raise LearningRealError(f"{name}: not a training-noise run of a trained variant ({sorted(after)})")
            if seed == train_seed:
                raise LearningRealError(f"{name}: a noise run at training seed {seed}, the seed of the variant's run")
            noised.add(variant)
            runs[seed] = res
        if len(noised) != 1:
            raise LearningRealError(f"training-noise runs of several variants: {sorted(noised)}")
        variant = noised.pop()
        noise["training"] = {
            "variant": variant,
            **training_noise({train_seed: after[variant], **runs}),
            "train_seconds": [run_seconds(run_dirs[n]) for n in noise_runs if n in run_dirs],
            "eval_seconds": [r["seconds"]["total"] for r in noise_runs.values()],
        }
    variants = {}
    for name, res in after.items():
        variants[name] = {
            "before": {k: before[k] for k in ("pass@1", "r_pass", "syntax_acc", "exec_acc")},
            "after": {k: res[k] for k in ("pass@1", "r_pass", "syntax_acc", "exec_acc")},
            **verdict(before, res, noise),
            "curves": step_curves(Path(run_dirs[name]) / "metrics.jsonl"),
            "train_seconds": run_seconds(run_dirs[name]),
            "eval_seconds": res["seconds"]["total"],
            "guarded": res["guarded"],
        }
    return {
        "noise": noise,
        "slice": {k: slice_record[k] for k in ("difficulty", "train", "val", "heldout")},
        "eval_seconds_base": [r["seconds"]["total"] for r in base_runs],
        "sampling": before["sampling"],
        "variants": variants,
    }


def training_noise_line(t: Mapping[str, Any] | None) -> str:
    """The report's line on the training noise (``summary["noise"]["training"]``)."""
    if not t:
        return "- training noise: not measured (`learning_real.training.noise_seeds` is empty): one run per variant"
    return (
        f"- training noise: `{t['variant']}` trained at seeds {t['seeds']} gives held-out pass@1 "
        f"{', '.join(f'{x:.3f}' for x in t['pass@1'])} (spread {t['pass@1_noise']:.3f}) and mean r_pass "
        f"{', '.join(f'{x:.3f}' for x in t['r_pass'])} (spread {t['r_pass_noise']:.3f})"
    )


def write_report(
    summary: Mapping[str, Any], out_md: str | os.PathLike, curves_png: str | os.PathLike, settings: Mapping[str, Any]
) -> None:
    """``report.md`` (tables: before / after, the verdict against the noise, cost) and the per-step curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codegrpo.plots import save_figure

    names = list(CURVE_KEYS)
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.4))
    for ax, panel in zip(axes, names):
        for variant, v in summary["variants"].items():
            pts = v["curves"].get(panel) or []
            if pts:
                ax.plot([s for s, _ in pts], [y for _, y in pts], marker="o", label=variant)
        ax.set_title(panel)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("SmolLM2-135M-Instruct, GRPO on easy KodCode problems (CPU): per-step training batch means")
    save_figure(fig, curves_png)

    n = summary["noise"]
    s = summary["sampling"]
    sl = summary["slice"]
    lines = [
        "# Does a real model learn? SmolLM2-135M-Instruct on easy KodCode problems (CPU)",
        "",
        "A measurement (codegrpo.learning_real, docs/learning.md), not a paper result. Every variant starts from "
        "the packaged SmolLM2-135M-Instruct and is trained by the pipeline's DHRCL trainer (verl 0.4.1, CPU "
        "mode, the sandboxed KodCode reward).",
        "",
        f"- slice: `{sl['difficulty']}` KodCode records, {len(sl['train'])} training, {len(sl['val'])} "
        f"validation and {len(sl['heldout'])} held-out problems (never trained on; question ids in "
        "`data/slice.json`)",
        f"- training: {json.dumps(dict(settings['training']), sort_keys=True)}",
        f"- evaluation (before and after alike): {s['n_samples']} samples per held-out problem, temperature "
        f"{s['temperature']}, top_p {s['top_p']}, {s['max_new_tokens']} new tokens, sampling seed {s['seed']}, "
        f"weights in {s.get('dtype', 'float32')}",
        f"- noise: the base model sampled at seeds {n['seeds']} gives pass@1 "
        f"{', '.join(f'{x:.3f}' for x in n['pass@1'])} (spread {n['pass@1_noise']:.3f}) and mean r_pass "
        f"{', '.join(f'{x:.3f}' for x in n['r_pass'])} (spread {n['r_pass_noise']:.3f})",
        training_noise_line(n.get("training")),
        "- criterion: a variant **learned** when held-out pass@1 after − before exceeds the sampling spread, the "
        "training spread (where measured) and twice the paired bootstrap standard error of the change (over "
        "problems)",
        "",
        "| variant | pass@1 before | pass@1 after | Δ pass@1 (± SE) | threshold | mean r_pass before | after | "
        "Δ r_pass (± SE) | syntax after | exec after | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, v in summary["variants"].items():
        b, a = v["before"], v["after"]
        lines.append(
            f"| {name} | {b['pass@1']:.3f} | {a['pass@1']:.3f} | {v['delta_pass@1']:+.3f} "
            f"(± {v['se_pass@1']:.3f}) | {v['threshold']:.3f} | {b['r_pass']:.3f} | {a['r_pass']:.3f} | "
            f"{v['delta_r_pass']:+.3f} (± {v['se_r_pass']:.3f}) | {a['syntax_acc']:.2f} | "
            f"{a['exec_acc']:.2f} | {v['verdict']}{'' if v['guarded'] else ' (UNGUARDED)'} |"
        )
    lines += [
        "",
        "Per training step (batch means of the rollouts; `zero-variance groups` = the share of GRPO groups "
        "whose rewards are all equal, which give no gradient): `curves.png`.",
        "",
        "| variant | step | score | r_syntax | r_exec | r_pass | zero-variance groups |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, v in summary["variants"].items():
        by_step: dict[int, dict] = {}
        for panel, pts in v["curves"].items():
            for step, y in pts:
                by_step.setdefault(step, {})[panel] = y
        for step in sorted(by_step):
            row = by_step[step]
            lines.append(
                f"| {name} | {step} | " + " | ".join(f"{row[p]:.3f}" if p in row else "" for p in CURVE_KEYS) + " |"
            )
    lines += [
        "",
        "Cost (wall seconds on this machine): "
        + ", ".join(
            f"{name} training {v['train_seconds']:.0f} + evaluation {v['eval_seconds']:.0f}"
            for name, v in summary["variants"].items()
            if v["train_seconds"] is not None
        )
        + f"; base model evaluations {', '.join(f'{x:.0f}' for x in summary['eval_seconds_base'])}"
        + (
            f"; training-noise runs: training {', '.join(f'{x:.0f}' for x in n['training']['train_seconds'] if x)}"
            f" + evaluation {', '.join(f'{x:.0f}' for x in n['training']['eval_seconds'])}"
            if n.get("training")
            else ""
        )
        + ".",
        "",
    ]
    with atomic_path(out_md) as tmp:
        Path(tmp).write_text("\n".join(lines), encoding="utf-8")

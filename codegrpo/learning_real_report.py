"""The statistics, summary and report of ``learning_real`` (:mod:`codegrpo.learning_real` makes the runs and the
evaluations; docs/learning.md).

* **noise** (:func:`noise_level`, :func:`training_noise`): the spread of held-out pass@1 of the base model over
  sampling seeds, and of the noise variant over training seeds (:func:`spread`).
* **learned** (:func:`verdict`): pass@1 after - before exceeds both measured noises and twice the paired
  bootstrap standard error of the change over problems (:func:`bootstrap_se`).
* **report** (:func:`summarize`, :func:`write_report`): ``summary.json``, ``report.md`` and the per-step curves
  (:func:`step_curves`: reward components and the share of zero-variance GRPO groups from each run's
  ``metrics.jsonl``).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.io import atomic_path, iter_jsonl
from codegrpo.learning_real import TIMING_FILE, LearningRealError, parse_run

CURVE_KEYS = {  # report panel -> metrics.jsonl key (per training step)
    "score": "critic/score/mean",
    "r_syntax": "reward/r_syntax/mean",
    "r_exec": "reward/r_exec/mean",
    "r_pass": "reward/r_pass/mean",
    "zero-variance groups": "dynamics/degenerate_group_ratio",
}


# ---------------------------------------------------------------------------------------------------------
# the noise and the verdict
# ---------------------------------------------------------------------------------------------------------
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

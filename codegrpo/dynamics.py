"""Training dynamics and efficiency of the DHRCL runs, from their ``metrics.jsonl`` files only.

* degenerate group ratio per step (``dynamics/degenerate_group_ratio``, the share of GRPO groups whose rewards
  are all equal; logged by the project trainer): :func:`plot_degenerate` draws every run on one chart;
* cost per step (``perf/step_s``, ``perf/gpu_hours``: verl's own step timing x the job's GPUs);
* efficiency (the paper's "0.55x the GPU-hours, 0.49x the iterations of GRPO to reach a target"):
  :func:`efficiency_table`. For each (model, seed), the GRPO baseline is the run of variant ``grpo_variant``
  (``baseline_binary``: GRPO with the binary pass/fail reward, docs/dhrcl.md); the target is ``fraction`` x that
  run's **final** validation value of ``metric`` (``val-*/kodcode/<metric>/mean@N``, largest N). Each run's
  steps to target = the first validated step whose value reaches it; its GPU-hours = the sum of
  ``perf/gpu_hours`` over steps 1..that step. Ratios are run / GRPO of the same model and seed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping, Sequence

from codegrpo.verl.metrics import DEGENERATE_KEY, GPU_HOURS_KEY, STEP_S_KEY

_VAL = re.compile(r"^val-(?:core|aux)/(?P<ds>[^/]+)/(?P<key>[^/]+)/mean@(?P<n>\d+)$")
_RUN = re.compile(r"^dhrcl-(?:(?P<model>.+)-)?(?P<variant>[A-Za-z0-9_]+)-seed(?P<seed>\d+)$")


def parse_run(run: str) -> tuple[str | None, str, int]:
    """``dhrcl-[<model>-]<variant>-seed<seed>`` → (model or None, variant, seed)."""
    m = _RUN.match(run)
    if not m:
        raise ValueError(f"{run!r} is not a DHRCL run name dhrcl-[<model>-]<variant>-seed<seed>")
    return m["model"], m["variant"], int(m["seed"])


def validation_value(row: Mapping, metric: str, data_source: str = "kodcode") -> float | None:
    best = None
    for k, v in row.items():
        m = _VAL.match(k)
        if m and m["ds"] == data_source and m["key"] == metric and v is not None:
            n = int(m["n"])
            if best is None or n > best[0]:
                best = (n, float(v))
    return None if best is None else best[1]


def validation_curve(rows: Sequence[Mapping], metric: str) -> list[tuple[int, float]]:
    out = []
    for r in rows:
        v = validation_value(r, metric)
        if v is not None:
            out.append((int(r["step"]), v))
    return sorted(out)


def cumulative(rows: Sequence[Mapping], key: str, upto: int) -> float | None:
    """Sum of ``key`` over training steps 1..``upto``; None when a step in that range lacks it."""
    by_step = {int(r["step"]): r.get(key) for r in rows if int(r["step"]) >= 1}
    vals = [by_step.get(s) for s in range(1, upto + 1)]
    if any(v is None for v in vals):
        return None
    return float(sum(vals))


def steps_to_target(rows: Sequence[Mapping], metric: str, target: float) -> dict | None:
    """First validated step whose ``metric`` reaches ``target``, with the GPU-hours and wall-clock to get there."""
    for step, v in validation_curve(rows, metric):
        if v >= target:
            return {
                "step": step,
                "value": v,
                "gpu_hours": cumulative(rows, GPU_HOURS_KEY, step),
                "wall_s": cumulative(rows, STEP_S_KEY, step),
            }
    return None


def step_costs(rows: Sequence[Mapping]) -> dict:
    """Mean wall-clock seconds and GPU-hours per training step."""
    s = [float(r[STEP_S_KEY]) for r in rows if r.get(STEP_S_KEY) is not None]
    g = [float(r[GPU_HOURS_KEY]) for r in rows if r.get(GPU_HOURS_KEY) is not None]
    return {"step_s": sum(s) / len(s) if s else None, "gpu_hours_per_step": sum(g) / len(g) if g else None}


def degenerate_curve(rows: Sequence[Mapping]) -> tuple[list[int], list[float]]:
    pts = [(int(r["step"]), float(r[DEGENERATE_KEY])) for r in rows if r.get(DEGENERATE_KEY) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def read_runs(paths: Mapping[str, str | os.PathLike]) -> dict[str, list[dict]]:
    """run name → its metrics rows (a missing file: no rows)."""
    from codegrpo.plots import read_metrics

    return {run: (read_metrics(p) if Path(p).is_file() else []) for run, p in paths.items()}


def efficiency_rows(
    runs: Mapping[str, Sequence[Mapping]],
    grpo_variant: str = "baseline_binary",
    fraction: float = 0.9,
    metric: str = "all_passed",
) -> tuple[list[dict], list[str]]:
    """One row per run (see the module docstring) and notes on what could not be computed."""
    if not 0 < fraction <= 1:
        raise ValueError(f"efficiency fraction must be in (0, 1], got {fraction}")
    notes: list[str] = []
    parsed = {run: parse_run(run) for run in runs}
    base = {(m, s): run for run, (m, v, s) in parsed.items() if v == grpo_variant}
    out = []
    for run in sorted(runs, key=lambda r: (parsed[r][0] or "", parsed[r][2], parsed[r][1] != grpo_variant, r)):
        model, variant, seed = parsed[run]
        rows = runs[run]
        row = {
            "_run": run,
            "model": model or "",
            "variant": variant,
            "seed": seed,
            **step_costs(rows),
            "degenerate_mean": None,
            "target": None,
            "steps": None,
            "gpu_hours": None,
            "steps_ratio": None,
            "gpu_hours_ratio": None,
        }
        _, deg = degenerate_curve(rows)
        row["degenerate_mean"] = sum(deg) / len(deg) if deg else None
        b = base.get((model, seed))
        if b is None:
            notes.append(f"{run}: no GRPO run ({grpo_variant}) of the same model and seed; no target")
            out.append(row)
            continue
        curve = validation_curve(runs[b], metric)
        if not curve:
            notes.append(f"{run}: the GRPO run {b} has no validation value of {metric}")
            out.append(row)
            continue
        row["target"] = fraction * curve[-1][1]
        mine = steps_to_target(rows, metric, row["target"])
        ref = steps_to_target(runs[b], metric, row["target"])
        if mine is None:
            notes.append(f"{run}: never reached {row['target']:.4f} ({metric})")
        else:
            row["steps"], row["gpu_hours"] = mine["step"], mine["gpu_hours"]
            if ref is not None and ref["step"]:
                row["steps_ratio"] = mine["step"] / ref["step"]
                if mine["gpu_hours"] is not None and ref["gpu_hours"]:
                    row["gpu_hours_ratio"] = mine["gpu_hours"] / ref["gpu_hours"]
        out.append(row)
    return out, notes


def plot_degenerate(runs: Mapping[str, Sequence[Mapping]], out_path: str | os.PathLike) -> int:
    """Every run's degenerate group ratio per step on one chart; returns the number of curves drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codegrpo.plots import save_figure

    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = 0
    for run in sorted(runs):
        x, y = degenerate_curve(runs[run])
        if x:
            ax.plot(x, y, marker="o", ms=2, lw=1, label=run)
            drawn += 1
    ax.set_xlabel("training step")
    ax.set_ylabel("degenerate group ratio\n(share of GRPO groups with equal rewards)")
    ax.set_ylim(-0.02, 1.02)
    if drawn:
        ax.legend(fontsize=6, ncol=2)
    else:
        ax.text(0.5, 0.5, "no run logged dynamics/degenerate_group_ratio", ha="center", transform=ax.transAxes)
    save_figure(fig, out_path)
    return drawn

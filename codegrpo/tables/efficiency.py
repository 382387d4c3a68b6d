"""Training dynamics and efficiency table from the DHRCL runs' metrics.jsonl files (codegrpo.dynamics)."""

from __future__ import annotations

import os
from typing import Mapping

from codegrpo.tables.common import OURS, Table
from codegrpo.tables.seeds import merge_seed_rows


EFFICIENCY_COLUMNS = [
    "model",
    "variant",
    "seeds",
    "step_s",
    "gpu_hours_per_step",
    "degenerate_mean",
    "target",
    "steps",
    "gpu_hours",
    "steps_ratio",
    "gpu_hours_ratio",
]


def table_efficiency(
    metrics_paths: Mapping[str, str | os.PathLike],
    grpo_variant: str = "baseline_binary",
    fraction: float = 0.9,
    metric: str = "all_passed",
) -> Table:
    """Per DHRCL variant (mean ± std over seeds): wall-clock and GPU-hours per step, the mean degenerate group
    ratio, and the steps / GPU-hours to reach ``fraction`` x the final validation ``metric`` of the GRPO run
    (``grpo_variant``) of the same model and seed, with the ratios to GRPO (the paper's 0.49x / 0.55x rows)."""
    from codegrpo import dynamics

    rows, notes = dynamics.efficiency_rows(dynamics.read_runs(metrics_paths), grpo_variant, fraction, metric)
    t = Table(
        "efficiency",
        "DHRCL training dynamics and efficiency against GRPO",
        [c for c in EFFICIENCY_COLUMNS if c != "seeds"] + ["source"],
        [{**r, "variant": r["variant"], "source": OURS} for r in rows],
    )
    t.notes = [
        f"target = {fraction:g} x the final validation {metric} (val-*/kodcode/{metric}/mean@N) of the GRPO "
        f"run ({grpo_variant}) of the same model and seed; steps = first validated step at or above it; "
        "GPU-hours = sum of perf/gpu_hours (verl's timing_s/step x the job's GPUs) up to that step; "
        "ratios = this run / GRPO (paper: 0.49x iterations, 0.55x GPU-hours for DHRCL).",
        "degenerate_mean = mean over steps of the share of GRPO groups whose rewards are all equal "
        "(dynamics/degenerate_group_ratio).",
        *notes,
    ]
    value_cols = EFFICIENCY_COLUMNS[EFFICIENCY_COLUMNS.index("seeds") + 1 :]
    for r in t.rows:
        r["method"] = r["_run"]
        r.pop("seed", None)
    merged = merge_seed_rows(t, value_cols)
    merged.columns = ["model", "variant", "seeds", *value_cols, "source"]
    return merged

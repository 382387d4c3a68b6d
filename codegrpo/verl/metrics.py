"""Per-step metrics file ``results/runs/<run>/metrics.jsonl`` and the verl logger that feeds it.

One JSON object per step: ``{"step": N, "<metric>": value, ...}``, ordered by step. Several log calls for the same
step (SFT logs ``train/*`` and ``val/*`` separately) are merged into one line. A resumed run re-executes the steps
after its last checkpoint: the first value logged for a step in a process replaces what an earlier (killed)
process wrote for that step, so the file never holds a duplicated or stale step. The file is rewritten
atomically on every log call.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path

from codegrpo.io import atomic_open


def _clean(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        v = float(value)
        return v if math.isfinite(v) else None
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy / torch scalars
        return _clean(value.item())
    if isinstance(value, str):
        return value
    return None


class MetricsFile:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.rows: dict[int, dict] = {}
        self._fresh: set[int] = set()  # steps already logged by this process
        if self.path.is_file():
            with open(self.path, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                        self.rows[int(row["step"])] = row
                    except (ValueError, KeyError, TypeError) as exc:
                        raise ValueError(f"{self.path}:{lineno}: not a metrics line ({exc})") from exc

    def log(self, step: int, metrics: dict) -> None:
        step = int(step)
        clean = {k: v for k, v in ((k, _clean(v)) for k, v in metrics.items()) if v is not None}
        if step in self._fresh:
            self.rows[step].update(clean)
        else:
            self.rows[step] = {"step": step, **clean}
            self._fresh.add(step)
        self.flush()

    def flush(self) -> None:
        with atomic_open(self.path) as fh:
            for step in sorted(self.rows):
                fh.write(json.dumps(self.rows[step], sort_keys=False) + "\n")


def tracking_class(metrics_file: str | os.PathLike | None, before_log=None, step_offset: int = 0):
    """A subclass of verl's ``Tracking`` that also writes ``metrics_file``.

    ``before_log(step, data) -> data`` may add or change metrics (the trainer adds reward components and runs
    the step callbacks there); ``step_offset`` shifts the step numbers (SFT resume).
    """
    from verl.utils.tracking import Tracking

    class ProjectTracking(Tracking):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._codegrpo_metrics = MetricsFile(metrics_file) if metrics_file else None

        def log(self, data, step, *args, **kwargs):
            step = int(step) + step_offset
            data = dict(data)
            if before_log is not None:
                data = before_log(step, data) or data
            super().log(data, step, *args, **kwargs)
            if self._codegrpo_metrics is not None:
                self._codegrpo_metrics.log(step, data)

    return ProjectTracking


# ---------------------------------------------------------------------------------------------------------
# Training dynamics and cost per step (every GRPO run; docs/dhrcl.md, "Training dynamics and efficiency")
# ---------------------------------------------------------------------------------------------------------
DEGENERATE_KEY = "dynamics/degenerate_group_ratio"
STEP_S_KEY = "perf/step_s"
GPU_HOURS_KEY = "perf/gpu_hours"


def degenerate_group_ratio(scores, uids, tol: float = 1e-9) -> float | None:
    """Share of GRPO groups (samples with the same ``uid``) whose rewards are all equal (within ``tol``): such a
    group has zero advantage everywhere and gives no gradient. None for an empty batch."""
    if len(scores) != len(uids):
        raise ValueError(f"degenerate_group_ratio: {len(scores)} scores but {len(uids)} uids")
    groups: dict = {}
    for s, u in zip(scores, uids):
        groups.setdefault(u, []).append(float(s))
    if not groups:
        return None
    flat = sum(1 for v in groups.values() if max(v) - min(v) <= tol)
    return flat / len(groups)


def step_cost(data: dict, n_gpus: int) -> dict:
    """The step's wall-clock (verl's own ``timing_s/step``) and GPU-hours (wall-clock x the job's GPUs, the
    trainer's ``n_gpus_per_node x nnodes``); empty when the step was not timed (validation-only step 0)."""
    t = data.get("timing_s/step")
    if t is None:
        return {}
    return {STEP_S_KEY: float(t), GPU_HOURS_KEY: float(t) * int(n_gpus) / 3600.0}

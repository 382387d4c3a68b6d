"""Trend-based curriculum controller for DHRCL (pure state machine, JSON-serialisable).

Stages: 1 syntax -> 2 execution -> 3 pass & structure (last). At every validation the controller receives the
validation means of the reward components and the training step:

* the current stage's primary metric (stage 1: ``r_syntax``, stage 2: ``r_exec``) is appended to the stage's
  history;
* once the stage has ``window`` evaluations, a least-squares slope of the last ``window`` values against the
  evaluation index (i.e. per evaluation) is fitted; the check *plateaus* when ``slope < epsilon`` or the latest
  value is ``>= saturation``;
* the stage advances after ``patience`` consecutive plateau checks, never before ``min_steps`` training steps in
  the stage, and always once it has lasted ``max_steps`` (default a fraction of the step budget);
* with ``forced_schedule=[n1, n2]`` the trend is ignored and stage k lasts exactly ``n_k`` steps (ablation).

Every transition is logged with its step and reason. The window, epsilon, saturation, patience, min/max steps
and the evaluation cadence are this project's reconstruction (docs/dhrcl.md), each one a setting.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

NUM_STAGES = 3
STAGE_NAMES = {1: "syntax", 2: "execution", 3: "pass_structure"}
DEFAULT_STAGE_METRICS = {1: "r_syntax", 2: "r_exec", 3: "r_pass"}
# why a stage ended: the trend rule (saturation: the metric reached ``saturation``; plateau: its slope stayed under
# ``epsilon``), the stage's step cap, or the fixed schedule of the ablation
TRANSITION_KINDS = ("saturation", "plateau", "max_steps", "forced_schedule")


@dataclass
class CurriculumConfig:
    total_steps: int | None = None  # the step budget (for the default max_steps)
    eval_every: int = 10  # validation cadence in training steps
    window: int = 5  # W evaluations in the trend fit
    epsilon: float = 0.002  # plateau: slope per evaluation below this
    saturation: float = 0.98  # plateau: metric at or above this
    patience: int = 2  # consecutive plateau checks before advancing
    min_steps: int | None = None  # per stage; default window * eval_every
    max_fraction: tuple[float, float] = (0.3, 0.3)  # max steps of stages 1 and 2 as a fraction of total_steps
    max_steps: tuple[int, int] | None = None  # explicit max steps of stages 1 and 2 (overrides max_fraction)
    forced_schedule: tuple[int, int] | None = None  # fixed steps of stages 1 and 2 (ablation)
    stage_metrics: dict[int, str] = field(default_factory=lambda: dict(DEFAULT_STAGE_METRICS))

    def __post_init__(self):
        self.stage_metrics = {int(k): str(v) for k, v in dict(self.stage_metrics).items()}
        for name in ("max_fraction", "max_steps", "forced_schedule"):
            val = getattr(self, name)
            if val is not None:
                val = tuple(val)
                if len(val) != NUM_STAGES - 1:
                    raise ValueError(f"curriculum {name} needs {NUM_STAGES - 1} values (stages 1 and 2), got {val!r}")
                setattr(self, name, val)
        if self.window < 2:
            raise ValueError(f"curriculum window must be >= 2 (a slope needs two points), got {self.window}")
        if self.patience < 1 or self.eval_every < 1:
            raise ValueError("curriculum patience and eval_every must be >= 1")

    @property
    def min_steps_per_stage(self) -> int:
        return int(self.min_steps) if self.min_steps is not None else self.window * self.eval_every

    def max_steps_for(self, stage: int) -> int | None:
        if stage >= NUM_STAGES:
            return None
        if self.max_steps is not None:
            return int(self.max_steps[stage - 1])
        if self.total_steps:
            return max(1, int(round(self.max_fraction[stage - 1] * self.total_steps)))
        return None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CurriculumConfig":
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown curriculum settings: {sorted(unknown)}")
        return cls(**dict(d))


def ls_slope(values: list[float]) -> float:
    """Least-squares slope of ``values`` against their index 0..n-1."""
    n = len(values)
    if n < 2:
        return math.nan
    mx = (n - 1) / 2
    my = sum(values) / n
    num = sum((i - mx) * (v - my) for i, v in enumerate(values))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den


@dataclass
class Decision:
    stage: int
    advanced: bool
    reason: str
    check: dict[str, Any]


class CurriculumController:
    """Decides the stage from validation metrics. ``observe`` is called after each validation."""

    def __init__(self, config: CurriculumConfig | None = None):
        self.config = config or CurriculumConfig()
        self.stage = 1
        self.stage_start_step = 0
        self.plateau_count = 0
        self.history: list[dict[str, Any]] = []  # one entry per observation
        self.transitions: list[dict[str, Any]] = []  # {"step", "from", "to", "reason"}

    # -- the rule ----------------------------------------------------------------------------------------
    def _stage_values(self) -> list[float]:
        return [h["value"] for h in self.history if h["stage"] == self.stage and h["value"] is not None]

    def observe(self, step: int, metrics: Mapping[str, float]) -> Decision:
        cfg = self.config
        step = int(step)
        metric = cfg.stage_metrics.get(self.stage)
        value = metrics.get(metric) if metric else None
        if value is not None:
            value = float(value)
        entry = {
            "step": step,
            "stage": self.stage,
            "metric": metric,
            "value": value,
            "slope": None,
            "plateau": None,
            "plateau_count": self.plateau_count,
        }
        self.history.append(entry)
        in_stage = step - self.stage_start_step
        if self.stage >= NUM_STAGES:
            return Decision(self.stage, False, "last stage", entry)

        if cfg.forced_schedule is not None:
            if in_stage >= int(cfg.forced_schedule[self.stage - 1]):
                return self._advance(
                    step,
                    f"forced schedule: {in_stage} >= {cfg.forced_schedule[self.stage - 1]} steps in stage {self.stage}",
                    entry,
                    "forced_schedule",
                )
            return Decision(self.stage, False, "forced schedule", entry)

        if value is None:
            raise KeyError(
                f"curriculum: validation metrics lack {metric!r} (stage {self.stage}); got {sorted(metrics)}"
            )
        vals = self._stage_values()
        reason = "collecting"
        if len(vals) >= cfg.window:
            window = vals[-cfg.window :]
            slope = ls_slope(window)
            saturated = value >= cfg.saturation
            flat = slope < cfg.epsilon
            plateau = saturated or flat
            self.plateau_count = self.plateau_count + 1 if plateau else 0
            entry.update(slope=slope, plateau=plateau, plateau_count=self.plateau_count)
            why = []
            if flat:
                why.append(f"slope {slope:.5f} < epsilon {cfg.epsilon}")
            if saturated:
                why.append(f"{metric} {value:.4f} >= saturation {cfg.saturation}")
            reason = ("plateau: " + " and ".join(why)) if plateau else f"rising: slope {slope:.5f}"
            if self.plateau_count >= cfg.patience and in_stage >= cfg.min_steps_per_stage:
                return self._advance(
                    step,
                    f"{reason}; {self.plateau_count} consecutive plateau checks "
                    f">= patience {cfg.patience}; {in_stage} steps in stage",
                    entry,
                    "saturation" if saturated else "plateau",
                )
        max_steps = cfg.max_steps_for(self.stage)
        if max_steps is not None and in_stage >= max_steps:
            return self._advance(
                step, f"max steps: {in_stage} >= {max_steps} steps in stage {self.stage}", entry, "max_steps"
            )
        return Decision(self.stage, False, reason, entry)

    def _advance(self, step: int, reason: str, entry: dict, kind: str) -> Decision:
        """Move to the next stage; the transition records why: ``kind`` (one of :data:`TRANSITION_KINDS`), the
        readable ``reason``, and the trend check behind it (metric, value, slope over ``window`` evaluations)."""
        old, started = self.stage, self.stage_start_step
        self.stage += 1
        self.stage_start_step = step
        self.plateau_count = 0
        self.transitions.append(
            {
                "step": step,
                "from": old,
                "to": self.stage,
                "kind": kind,
                "reason": reason,
                "metric": entry.get("metric"),
                "value": entry.get("value"),
                "slope": entry.get("slope"),
                "window": self.config.window,
                "steps_in_stage": step - started,
            }
        )
        entry["advanced_to"] = self.stage
        return Decision(self.stage, True, reason, entry)

    # -- serialisation -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        cfg = asdict(self.config)
        cfg["stage_metrics"] = {str(k): v for k, v in self.config.stage_metrics.items()}
        import json

        state = {
            "version": 1,
            "stage": self.stage,
            "stage_name": STAGE_NAMES[self.stage],
            "stage_start_step": self.stage_start_step,
            "plateau_count": self.plateau_count,
            "config": cfg,
            "history": list(self.history),
            "transitions": list(self.transitions),
        }
        return json.loads(json.dumps(state))  # plain JSON types (tuples -> lists), detached from live state

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CurriculumController":
        if d.get("version") != 1:
            raise ValueError(f"curriculum state: unsupported version {d.get('version')!r}")
        ctl = cls(CurriculumConfig.from_dict(d["config"]))
        ctl.stage = int(d["stage"])
        if ctl.stage not in STAGE_NAMES:
            raise ValueError(f"curriculum state: stage {ctl.stage} out of range")
        ctl.stage_start_step = int(d["stage_start_step"])
        ctl.plateau_count = int(d["plateau_count"])
        ctl.history = [dict(h) for h in d.get("history", [])]
        ctl.transitions = [dict(t) for t in d.get("transitions", [])]
        return ctl

    def save(self, path: str | Path) -> None:
        from codegrpo.io import write_json

        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "CurriculumController":
        import json

        with open(path, encoding="utf-8") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from exc
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: bad curriculum state: {exc}") from exc

    def rewind(self, step: int) -> None:
        """Forget observations after ``step`` (resuming from an earlier checkpoint)."""
        self.history = [h for h in self.history if h["step"] <= step]
        self.transitions = [t for t in self.transitions if t["step"] <= step]
        self.stage = self.transitions[-1]["to"] if self.transitions else 1
        self.stage_start_step = self.transitions[-1]["step"] if self.transitions else 0
        pc = 0
        for h in self.history:
            if h["stage"] == self.stage and h.get("plateau_count") is not None:
                pc = h["plateau_count"]
        self.plateau_count = pc if not self.history or self.history[-1]["stage"] == self.stage else 0

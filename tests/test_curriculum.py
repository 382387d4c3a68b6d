"""Curriculum controller on synthetic validation histories: it advances exactly when the rule says."""

from __future__ import annotations

import json

import numpy as np
import pytest

from codegrpo.curriculum import CurriculumConfig, CurriculumController, ls_slope


def feed(ctl, values, metric, start=0, every=10):
    """Observe one value per evaluation; returns the steps at which the stage advanced."""
    adv = []
    for i, v in enumerate(values):
        step = start + i * every
        d = ctl.observe(step, {"r_syntax": v, "r_exec": v, "r_pass": v})
        if d.advanced:
            adv.append(step)
    return adv


def test_ls_slope():
    assert ls_slope([0, 1, 2, 3]) == pytest.approx(1.0)
    assert ls_slope([5, 5, 5]) == 0.0
    vals = [0.1, 0.3, 0.2, 0.4, 0.3]
    assert ls_slope(vals) == pytest.approx(float(np.polyfit(range(5), vals, 1)[0]))


def test_rising_metric_never_advances_before_max():
    ctl = CurriculumController(CurriculumConfig(total_steps=1000, window=5, epsilon=0.002, patience=2))
    values = [0.1 + 0.01 * i for i in range(25)]  # slope 0.01 per evaluation > epsilon
    assert feed(ctl, values, "r_syntax") == []
    assert ctl.stage == 1


def test_plateau_advances_after_patience_and_min_steps():
    cfg = CurriculumConfig(total_steps=10_000, eval_every=10, window=5, epsilon=0.002, patience=2)
    ctl = CurriculumController(cfg)
    # rising for 6 evaluations (steps 0..50), then flat at 0.7
    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6] + [0.7] * 10
    adv = feed(ctl, values, "r_syntax")
    # The window of the last 5 values must be flat: steps 60..100 -> [0.7]*5 at step 100 (first flat check,
    # slope 0); step 110 is the second consecutive plateau check -> advance (min_steps 50 reached long ago).
    # At step 90 the window [0.6, 0.7, 0.7, 0.7, 0.7] has slope 0.02 (rising), resetting the count.
    assert adv == [110]
    assert ctl.stage == 2 and ctl.stage_start_step == 110
    t = ctl.transitions[0]
    assert (t["step"], t["from"], t["to"]) == (110, 1, 2) and "patience" in t["reason"] and "slope" in t["reason"]


def test_patience_counts_consecutive_checks_only():
    cfg = CurriculumConfig(total_steps=10_000, window=3, epsilon=0.002, patience=2, min_steps=0)
    ctl = CurriculumController(cfg)
    # windows: [.5,.5,.5] flat(1) -> [.5,.5,.6] rising (reset) -> [.5,.6,.6] rising -> [.6,.6,.6] flat(1)
    # -> [.6,.6,.6] flat(2) -> advance
    adv = feed(ctl, [0.5, 0.5, 0.5, 0.6, 0.6, 0.6, 0.6], "r_syntax")
    assert adv == [60]
    checks = [h["plateau"] for h in ctl.history]
    assert checks == [None, None, True, False, False, True, True]


def test_saturation_counts_as_plateau_even_when_rising():
    cfg = CurriculumConfig(total_steps=10_000, window=3, patience=1, min_steps=20, saturation=0.98)
    ctl = CurriculumController(cfg)
    adv = feed(ctl, [0.90, 0.95, 0.985, 0.99], "r_syntax")  # slope > epsilon but the metric saturates
    assert adv == [20]
    assert "saturation" in ctl.transitions[0]["reason"]


def test_min_steps_delays_advancing():
    cfg = CurriculumConfig(total_steps=10_000, window=3, patience=1, min_steps=80)
    ctl = CurriculumController(cfg)
    adv = feed(ctl, [0.5] * 12, "r_syntax")  # flat from the first full window (step 20)
    assert adv == [80]


def test_max_steps_forces_advance_and_stage_two_uses_exec():
    cfg = CurriculumConfig(total_steps=200, window=5, patience=2)  # max 60 steps for stages 1 and 2
    ctl = CurriculumController(cfg)
    steps = []
    for i in range(20):
        step = i * 10
        d = ctl.observe(step, {"r_syntax": 0.001 * step, "r_exec": 0.002 * step, "r_pass": 0.0})
        if d.advanced:
            steps.append((step, d.stage))
    assert steps == [(60, 2), (120, 3)]
    assert all("max steps" in t["reason"] for t in ctl.transitions)
    assert [h["metric"] for h in ctl.history[:8]] == ["r_syntax"] * 7 + ["r_exec"]
    assert ctl.stage == 3
    assert not ctl.observe(500, {"r_pass": 0.1}).advanced  # stage 3 is last


def test_forced_schedule_ignores_trend():
    cfg = CurriculumConfig(total_steps=1000, forced_schedule=(30, 50))
    ctl = CurriculumController(cfg)
    adv = [s for s in range(0, 200, 10) if ctl.observe(s, {}).advanced]
    assert adv == [30, 80] and ctl.stage == 3
    assert "forced schedule" in ctl.transitions[1]["reason"]


def test_missing_metric_is_an_error():
    ctl = CurriculumController(CurriculumConfig())
    with pytest.raises(KeyError, match="r_syntax"):
        ctl.observe(0, {"r_exec": 1.0})


def test_state_round_trip_and_resume(tmp_path):
    cfg = CurriculumConfig(total_steps=10_000, window=3, patience=2, min_steps=0)
    a = CurriculumController(cfg)
    values = [0.5, 0.5, 0.5, 0.5, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5]
    metrics = lambda v: {"r_syntax": v, "r_exec": v}  # noqa: E731
    for i, v in enumerate(values[:5]):
        a.observe(i * 10, metrics(v))
    path = tmp_path / "curriculum.json"
    a.save(path)
    b = CurriculumController.load(path)
    assert b.to_dict() == json.loads(json.dumps(a.to_dict()))
    ref = CurriculumController(cfg)
    for i, v in enumerate(values):
        ref.observe(i * 10, metrics(v))
    for i, v in enumerate(values[5:], start=5):  # continuing from the saved state gives the same decisions
        b.observe(i * 10, metrics(v))
    assert b.to_dict() == json.loads(json.dumps(ref.to_dict()))
    assert b.transitions and b.transitions[0]["step"] == 30


def test_rewind_to_checkpoint():
    cfg = CurriculumConfig(total_steps=10_000, window=3, patience=1, min_steps=0)
    ctl = CurriculumController(cfg)
    for i in range(8):
        ctl.observe(i * 10, {"r_syntax": 0.5, "r_exec": 0.5})
    assert ctl.stage == 3 and [t["step"] for t in ctl.transitions] == [20, 50]
    ctl.rewind(40)
    assert ctl.stage == 2 and ctl.stage_start_step == 20 and len(ctl.history) == 5


def test_bad_state_file_names_the_file(tmp_path):
    p = tmp_path / "curriculum.json"
    p.write_text('{\n  "version": 1,\n  oops\n}')
    with pytest.raises(ValueError, match=r"curriculum.json: line 3"):
        CurriculumController.load(p)
    p.write_text(json.dumps({"version": 1, "stage": 7, "config": {}, "stage_start_step": 0, "plateau_count": 0}))
    with pytest.raises(ValueError, match="stage 7"):
        CurriculumController.load(p)


def test_config_validation():
    with pytest.raises(ValueError, match="window"):
        CurriculumConfig(window=1)
    with pytest.raises(ValueError, match="forced_schedule"):
        CurriculumConfig(forced_schedule=(1, 2, 3))
    with pytest.raises(ValueError, match="unknown"):
        CurriculumConfig.from_dict({"windw": 3})
    assert CurriculumConfig(window=4, eval_every=5).min_steps_per_stage == 20
    assert CurriculumConfig(total_steps=100).max_steps_for(1) == 30
    assert CurriculumConfig(total_steps=100).max_steps_for(3) is None

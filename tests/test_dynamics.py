"""Training dynamics and efficiency from small hand-made metrics files (codegrpo/dynamics.py, the trainer's
per-step metrics, the efficiency table and the degenerate-ratio chart)."""

from __future__ import annotations

import json

import pytest

from codegrpo import dynamics
from codegrpo.tables import table_efficiency, to_markdown
from codegrpo.verl.metrics import DEGENERATE_KEY, GPU_HOURS_KEY, STEP_S_KEY, degenerate_group_ratio, step_cost

VAL = "val-aux/kodcode/all_passed/mean@1"


def test_degenerate_group_ratio_by_uid():
    # groups a (all 1), b (mixed), c (all 0): two of three are degenerate
    scores = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    uids = ["a", "a", "b", "b", "c", "c"]
    assert degenerate_group_ratio(scores, uids) == pytest.approx(2 / 3)
    assert degenerate_group_ratio([0.5, 0.5 + 1e-12], ["x", "x"]) == 1.0
    assert degenerate_group_ratio([], []) is None
    with pytest.raises(ValueError, match="2 scores but 1 uids"):
        degenerate_group_ratio([1, 2], ["a"])


def test_step_cost_from_verls_step_timing():
    assert step_cost({"timing_s/step": 36.0}, 8) == {STEP_S_KEY: 36.0, GPU_HOURS_KEY: pytest.approx(0.08)}
    assert step_cost({"val-core/x": 1.0}, 8) == {}  # the validation-only step 0


def test_reward_recorder_logs_the_degenerate_ratio():
    import numpy as np
    import torch

    from codegrpo.verl.trainer import _RewardRecorder

    class Data:
        non_tensor_batch = {"uid": np.array(["a", "a", "b", "b"], dtype=object)}

    def inner(data, return_dict=False):
        t = torch.zeros(4, 3)
        t[:, -1] = torch.tensor([1.0, 1.0, 0.0, 1.0])
        return {"reward_tensor": t, "reward_extra_info": {"score": [1.0, 1.0, 0.0, 1.0]}}

    rec = _RewardRecorder(inner)
    rec(Data())
    m = rec.pop_metrics()
    assert m[DEGENERATE_KEY] == 0.5 and m["reward/score/mean"] == 0.75
    assert DEGENERATE_KEY not in rec.pop_metrics()  # per step


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(val: dict[int, float], steps: int, step_s: float, n_gpus: int = 8, deg: float = 0.5) -> list[dict]:
    rows = []
    for s in range(0, steps + 1):
        r = {"step": s}
        if s:
            r.update({STEP_S_KEY: step_s, GPU_HOURS_KEY: step_s * n_gpus / 3600, DEGENERATE_KEY: deg})
        if s in val:
            r[VAL] = val[s]
        rows.append(r)
    return rows


@pytest.fixture
def runs(tmp_path):
    """GRPO (baseline_binary) and DHRCL (full) at seeds 0 and 1, validated every 2 steps."""
    grpo0 = _run({0: 0.1, 2: 0.2, 4: 0.3, 6: 0.4, 8: 0.5}, 8, 360.0, deg=0.6)  # final 0.5 -> target 0.45 at step 8
    full0 = _run({0: 0.1, 2: 0.3, 4: 0.46, 6: 0.5, 8: 0.55}, 8, 450.0, deg=0.2)  # reaches it at step 4
    grpo1 = _run({0: 0.1, 2: 0.2, 4: 0.3, 6: 0.4}, 6, 360.0, deg=0.6)  # final 0.4 -> target 0.36 at step 6
    full1 = _run({0: 0.1, 2: 0.37, 4: 0.4, 6: 0.45}, 6, 450.0, deg=0.3)  # reaches it at step 2
    never = _run({0: 0.0, 2: 0.1}, 2, 100.0)
    paths = {}
    for name, rows in {
        "dhrcl-baseline_binary-seed0": grpo0,
        "dhrcl-full-seed0": full0,
        "dhrcl-baseline_binary-seed1": grpo1,
        "dhrcl-full-seed1": full1,
        "dhrcl-Qwen3-4B-full-seed0": never,
    }.items():
        paths[name] = _write(tmp_path / name / "metrics.jsonl", rows)
    return paths


def test_steps_and_gpu_hours_to_reach_the_grpo_target(runs):
    rows, notes = dynamics.efficiency_rows(dynamics.read_runs(runs), "baseline_binary", 0.9, "all_passed")
    by = {r["_run"]: r for r in rows}
    g0, f0 = by["dhrcl-baseline_binary-seed0"], by["dhrcl-full-seed0"]
    assert g0["target"] == pytest.approx(0.45) and g0["steps"] == 8 and g0["steps_ratio"] == 1.0
    assert g0["gpu_hours"] == pytest.approx(8 * 360 * 8 / 3600)  # 6.4 GPU-hours
    assert f0["steps"] == 4 and f0["steps_ratio"] == 0.5
    assert f0["gpu_hours"] == pytest.approx(4 * 450 * 8 / 3600) and f0["gpu_hours_ratio"] == pytest.approx(4.0 / 6.4)
    assert f0["step_s"] == 450.0 and f0["degenerate_mean"] == pytest.approx(0.2)
    f1 = by["dhrcl-full-seed1"]
    assert f1["target"] == pytest.approx(0.36) and f1["steps"] == 2 and f1["steps_ratio"] == pytest.approx(2 / 6)
    assert by["dhrcl-Qwen3-4B-full-seed0"]["target"] is None
    assert any("Qwen3-4B-full-seed0: no GRPO run" in n for n in notes)
    with pytest.raises(ValueError, match="fraction"):
        dynamics.efficiency_rows({}, fraction=1.5)


def test_efficiency_table_merges_seeds(runs):
    t = table_efficiency(runs, "baseline_binary", 0.9, "all_passed")
    full = next(r for r in t.rows if r["variant"] == "full" and not r["model"])
    assert full["seeds"] == "0, 1"
    assert float(full["steps_ratio"]) == pytest.approx((0.5 + 2 / 6) / 2)
    md = to_markdown(t)
    assert "steps_ratio" in md and "0.9 x the final validation all_passed" in md


def test_a_run_that_never_reaches_the_target_is_noted(tmp_path):
    paths = {
        "dhrcl-baseline_binary-seed0": _write(tmp_path / "g" / "m.jsonl", _run({2: 0.5}, 2, 10.0)),
        "dhrcl-full-seed0": _write(tmp_path / "f" / "m.jsonl", _run({2: 0.1}, 2, 10.0)),
    }
    rows, notes = dynamics.efficiency_rows(dynamics.read_runs(paths))
    assert next(r for r in rows if r["variant"] == "full")["steps"] is None
    assert any("never reached 0.4500" in n for n in notes)


def test_parse_run_names():
    assert dynamics.parse_run("dhrcl-Qwen3-8B-baseline_verpo-seed2") == ("Qwen3-8B", "baseline_verpo", 2)
    assert dynamics.parse_run("dhrcl-full-seed0") == (None, "full", 0)
    with pytest.raises(ValueError, match="not a DHRCL run"):
        dynamics.parse_run("skin_rl")


def test_degenerate_chart_draws_every_run(runs, tmp_path):
    out = tmp_path / "degenerate.png"
    assert dynamics.plot_degenerate(dynamics.read_runs(runs), out) == 5
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

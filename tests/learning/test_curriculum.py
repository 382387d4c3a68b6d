"""Curriculum check of the learning checks (codegrpo.learning.curriculum, docs/learning.md): a DHRCL run whose
curriculum must advance by its trend rule.

Fast tests: the transition records of the curriculum controller, the token weights per stage.

Slow tests (run in CI): the curriculum check's DHRCL run on CPU (tests/learning/conftest.py::curriculum_run, once
for the package) and a VeRPO baseline run from its fine-tuned model.
"""

from __future__ import annotations

import json

import pytest

from codegrpo import learning
from codegrpo.config import load_config
from codegrpo.curriculum import CurriculumConfig, CurriculumController

from tests.conftest import REPO_ROOT as REPO


# ---------------------------------------------------------------------------------------------- fast
@pytest.mark.parametrize("values, kind", [([0.95, 0.96], "saturation"), ([0.40, 0.40], "plateau")])
def test_transitions_record_their_kind_and_trend(values, kind):
    ctl = CurriculumController(
        CurriculumConfig(total_steps=20, eval_every=1, window=2, saturation=0.9, patience=1, min_steps=1)
    )
    for step, v in enumerate(values):
        ctl.observe(step, {"r_syntax": v})
    (t,) = ctl.transitions
    assert t["kind"] == kind and t["from"] == 1 and t["to"] == 2 and t["window"] == 2
    assert t["metric"] == "r_syntax" and t["value"] == values[-1] and t["slope"] is not None


def test_transition_by_step_cap_is_marked_max_steps():
    ctl = CurriculumController(
        CurriculumConfig(total_steps=10, eval_every=1, window=5, patience=1, min_steps=1, max_fraction=(0.2, 0.2))
    )
    for step, v in enumerate([0.1, 0.2, 0.3]):
        ctl.observe(step, {"r_syntax": v})
    assert [t["kind"] for t in ctl.transitions] == ["max_steps"]


def test_token_weight_mode_per_stage():
    from codegrpo.verl.dhrcl import DEFAULT_VARIANTS, token_weight_mode

    full = DEFAULT_VARIANTS["full"]
    assert [token_weight_mode(full, s) for s in (1, 2, 3)] == ["confidence", "uniform", "uncertainty"]
    assert token_weight_mode(DEFAULT_VARIANTS["baseline_pass_rate"], 2) == "none"
    assert token_weight_mode(DEFAULT_VARIANTS["uniform_weights"], 1) == "uniform"


# ---------------------------------------------------------------------------------------------- slow
@pytest.mark.slow
def test_curriculum_advances_by_its_trend(curriculum_run):
    out, v = curriculum_run
    state = json.loads((out / "dhrcl" / "curriculum.json").read_text())
    transitions = state["transitions"]
    assert [(t["from"], t["to"]) for t in transitions] == [(1, 2), (2, 3)], transitions
    for t in transitions:
        assert t["kind"] in ("saturation", "plateau"), t
        assert t["window"] == v["trend"]["window"] and t["slope"] is not None and t["metric"] in ("r_syntax", "r_exec")
        assert "max steps" not in t["reason"]
    assert [t["token_weights"] for t in transitions] == [
        {"from": "confidence", "to": "uniform"},
        {"from": "uniform", "to": "uncertainty"},
    ]
    assert v["passed"] and v["by_trend"] and v["reached_stage"] == 3


@pytest.mark.slow
def test_reward_gating_moves_with_the_stage(curriculum_run):
    out, v = curriculum_run
    timeline = v["timeline"]
    stages = [r["stage"] for r in timeline]
    assert stages == sorted(stages) and set(stages) == {1, 2, 3}
    assert {r["gate"] for r in timeline} == {"a_syntax", "a_exec", "a_pass"}
    # each step's stage is the one curriculum.json had published after the previous validation
    transitions = json.loads((out / "dhrcl" / "curriculum.json").read_text())["transitions"]
    for r in timeline:
        expected = 1 + sum(1 for t in transitions if t["step"] < r["step"])
        assert r["stage"] == expected, (r, transitions)


@pytest.fixture(scope="module")
def verpo_run(curriculum_run, shared_ray):
    """baseline_verpo for 2 steps from the curriculum check's fine-tuned tiny model on its KodCode problems
    (same data and settings as the DHRCL run there, run folder dhrcl-baseline_verpo-seed0)."""
    from codegrpo.verl.dhrcl import run_dhrcl

    out, _ = curriculum_run
    cfg = load_config(REPO / "config.yaml")
    c = cfg["learning_check"]["curriculum"]
    problems = learning.curriculum_problems(cfg["data"]["kodcode"]["paths"], int(c["problems"]))
    ccfg = learning.curriculum_config(cfg, learning.prompt_tokens(out / "tiny", [p["prompt"] for p in problems]) + 8)
    ccfg["dhrcl"]["training"].update(total_training_steps=2, total_epochs=2, save_freq=2)
    ccfg["dhrcl"]["runs"] = ["baseline_verpo"]
    run_dir = out / "dhrcl-baseline_verpo-seed0"
    with shared_ray.joined():
        done = run_dhrcl(
            ccfg,
            "baseline_verpo",
            train_files=out / "data" / "rl_train.parquet",
            val_files=out / "data" / "rl_val.parquet",
            init_model=str(out / "sft"),
            run_dir=run_dir,
            seed=0,
        )
    return out, run_dir, done


@pytest.mark.slow
def test_verpo_baseline_trains_through_the_same_trainer(verpo_run):
    from codegrpo import dynamics
    from codegrpo.tables import table_efficiency

    out, run_dir, done = verpo_run
    assert (run_dir / "done.json").is_file() and (run_dir / "hf" / "config.json").is_file()
    # the same run folder layout as the curriculum check's DHRCL run
    assert {p.name for p in run_dir.iterdir()} == {p.name for p in (out / "dhrcl").iterdir()}
    settings = json.loads((run_dir / "settings.json").read_text())["settings"]
    assert settings["extra"]["variant_def"]["norm_adv_by_std"] is False
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r["step"] >= 1]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        # the fused VeRPO score, the dynamics and the step's cost, logged per step
        assert r["reward/score/mean"] == pytest.approx(r["reward/all_passed/mean"] + 0.5 * r["reward/r_dense/mean"])
        assert 0.0 <= r["reward/r_dense/mean"] <= 1.0
        assert 0.0 <= r["dynamics/degenerate_group_ratio"] <= 1.0
        assert r["perf/step_s"] > 0 and r["perf/gpu_hours"] == pytest.approx(r["perf/step_s"] / 3600)
    # the efficiency table and the chart from these real files (the VeRPO run standing in for GRPO here)
    paths = {
        "dhrcl-baseline_verpo-seed0": run_dir / "metrics.jsonl",
        "dhrcl-full-seed0": out / "dhrcl" / "metrics.jsonl",
    }
    t = table_efficiency(paths, grpo_variant="baseline_verpo", fraction=0.5, metric="r_pass")
    assert {r["variant"] for r in t.rows} == {"baseline_verpo", "full"}
    assert all(r["step_s"] is not None and r["degenerate_mean"] is not None for r in t.rows)
    assert dynamics.plot_degenerate(dynamics.read_runs(paths), out / "degenerate.png") == 2

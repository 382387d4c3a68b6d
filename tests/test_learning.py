"""Learning checks (codegrpo.learning, docs/learning.md): training moves rewards the right way.

Fast tests: the toy reward through the registry, the verdict rules, the test-only sign-flip hook of the policy
losses, the transition records of the curriculum, the target's plan.

Slow tests (run in CI): real GRPO runs on CPU through the pipeline's verl path (Hydra-validated launch, Ray,
FSDP2, HF rollout, the reward registry and verl's naive reward manager) on the toy task, one per policy loss and
one sign-flipped control, and a DHRCL run whose curriculum must advance by its trend rule. The runs happen once
per session (module fixtures), all joining the session's one Ray (tests/conftest.py::shared_ray), the direction
runs two at a time; each test reads their outputs.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from codegrpo import learning
from codegrpo.config import load_config
from codegrpo.curriculum import CurriculumConfig, CurriculumController
from codegrpo.rewards import compute_score, compute_score_batch

from tests.conftest import REPO_ROOT as REPO
from tests.verl import launch_files


# ---------------------------------------------------------------------------------------------- fast
def test_toy_reward_through_the_registry():
    r = compute_score("toy_target_chars", "12 ab 34", "0123456789")
    assert r == {"score": pytest.approx(4 / 6), "target_share": pytest.approx(4 / 6), "length": 8.0}
    assert compute_score("toy_target_chars", "abc", "0123456789")["score"] == 0.0
    assert compute_score("toy_target_chars", "   ", "0123456789")["score"] == 0.0
    assert compute_score("toy_target_chars", "aab", "a")["score"] == pytest.approx(2 / 3)
    out = compute_score_batch(["toy_target_chars"] * 2, ["9999", None], ["0123456789"] * 2, None)
    assert [o["score"] for o in out] == [1.0, 0.0]


def test_toy_dataset_is_verl_rl_schema_and_deterministic(tmp_path):
    import pandas as pd

    a = learning.write_toy_dataset(tmp_path / "a", 10, 3, seed=1)
    b = learning.write_toy_dataset(tmp_path / "b", 10, 3, seed=1)
    da, db = pd.read_parquet(a["train"]), pd.read_parquet(b["train"])
    assert len(da) == 10 and len(pd.read_parquet(a["val"])) == 3
    assert da["prompt"].map(lambda m: m[0]["content"]).tolist() == db["prompt"].map(lambda m: m[0]["content"]).tolist()
    assert set(da["data_source"]) == {"toy_target_chars"}
    assert da["reward_model"].iloc[0]["ground_truth"] == "0123456789"


@pytest.mark.parametrize(
    "curve, expect, passed",
    [
        ([0.5, 0.5, 0.6, 0.8, 0.9, 0.9], "up", True),
        ([0.5, 0.5, 0.5, 0.55, 0.5, 0.55], "up", False),  # within the margin
        ([0.9, 0.8, 0.7, 0.3, 0.2, 0.1], "up", False),  # the wrong way
        ([0.9, 0.8, 0.7, 0.3, 0.2, 0.1], "down", True),
    ],
)
def test_judge_compares_first_and_last_steps(curve, expect, passed):
    v = learning.judge(curve, expect, k=2, margin=0.1)
    assert v["passed"] is passed
    assert v["delta"] == pytest.approx(sum(curve[-2:]) / 2 - sum(curve[:2]) / 2)


def test_judge_needs_enough_steps():
    with pytest.raises(learning.LearningCheckError, match="3 steps"):
        learning.judge([0.1, 0.2, 0.3], "up", k=2, margin=0.1)


def test_reward_curve_reads_steps_and_names_bad_lines(tmp_path):
    f = tmp_path / "metrics.jsonl"
    f.write_text(
        '{"step": 0, "val-core/x": 1}\n{"step": 2, "critic/score/mean": 0.4}\n{"step": 1, "critic/score/mean": 0.2}\n'
    )
    assert learning.reward_curve(f) == [0.2, 0.4]
    f.write_text('{"step": 1, "critic/score/mean": 0.2}\nnot json\n')
    with pytest.raises(learning.LearningCheckError, match=r"metrics.jsonl: line 2: not valid JSON"):
        learning.reward_curve(f)


def _loss_inputs():
    torch.manual_seed(0)
    old = torch.log(torch.rand(3, 5) * 0.8 + 0.1)
    new = (old + 0.01 * torch.randn(3, 5)).requires_grad_(True)
    adv = torch.tensor([[1.0], [-0.5], [0.3]]).expand(3, 5).contiguous()
    mask = torch.ones(3, 5)
    return old, new, adv, mask


def test_sign_flipped_loss_has_the_opposite_gradient():
    from verl.trainer.ppo import core_algos

    from codegrpo.verl import losses

    cfg = {"clip_ratio": 0.2, "policy_loss": {}}
    old, new, adv, mask = _loss_inputs()
    ok = core_algos.compute_policy_loss(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, cliprange=0.2
    )[0]
    (g_ok,) = torch.autograd.grad(ok, new)
    flipped = core_algos.get_policy_loss_fn(losses.SIGN_FLIPPED)(old, new, adv, mask, "token-mean", cfg)[0]
    (g_flip,) = torch.autograd.grad(flipped, new)
    assert torch.allclose(g_flip, -g_ok)
    # the same hook inside a DHRCL weighting
    w_ok = losses.weighted_policy_loss("uniform", old, new, adv, mask, config=cfg)[0]
    w_flip = losses.weighted_policy_loss(
        "uniform", old, new, adv, mask, config={**cfg, "policy_loss": {losses.FLIP_KEY: True}}
    )[0]
    (g1,) = torch.autograd.grad(w_ok, new)
    (g2,) = torch.autograd.grad(w_flip, new)
    assert torch.allclose(g1, g_ok, atol=1e-6) and torch.allclose(g2, -g1)


def test_loss_overrides_select_each_loss():
    assert learning.loss_overrides("grpo") == ["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"]
    ov = learning.loss_overrides("dhrcl_uncertainty", {"tau": 2.0})
    assert ov[0] == "actor_rollout_ref.actor.policy_loss.loss_mode=dhrcl_uncertainty"
    assert "actor_rollout_ref.model.external_lib=codegrpo.verl.losses" in ov
    assert "+actor_rollout_ref.actor.policy_loss.dhrcl_tau=2.0" in ov
    assert learning.loss_overrides("grpo_sign_flipped")[0].endswith("=sign_flipped_vanilla")
    with pytest.raises(ValueError, match="unknown learning check"):
        learning.loss_overrides("nope")


def test_direction_launch_composes_with_verl(tmp_path):
    """The toy launch of every check validates against verl's Hydra config (the same launch the runs use)."""
    from codegrpo.verl.launch import grpo_launch

    cfg = learning.direction_config(load_config(REPO / "config.yaml"))
    for check in learning.CHECKS:
        overrides = learning.loss_overrides(check)
        launch = grpo_launch(
            cfg, cfg["skeleton_rl"], "skeleton_rl", **launch_files(tmp_path), extra_overrides=overrides
        )
        composed = launch.validate()
        assert composed.actor_rollout_ref.actor.policy_loss.loss_mode == learning.loss_overrides(check)[0].split("=")[1]
        assert composed.actor_rollout_ref.actor.optim.lr == cfg["learning_check"]["grpo"]["lr"]
        assert composed.data.max_prompt_length == cfg["learning_check"]["grpo"]["max_prompt_length"]


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


def test_learning_check_target_plans_every_run(snakemake_bin, tmp_path):
    out = subprocess.run(
        [snakemake_bin, "-n", "learning_check", "--quiet", "rules", "--config", f"results_dir={tmp_path}/results"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    counts = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    assert counts.get("learning_direction") == len(learning.CHECKS)
    assert counts.get("learning_curriculum") == 1 and counts.get("learning_report") == 1


# ---------------------------------------------------------------------------------------------- slow
@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory, shared_ray):
    """Every direction check once: the toy data, its tiny model, five GRPO runs on CPU (joining the session's Ray)."""
    from codegrpo.models import build_tiny_model

    cfg = load_config(REPO / "config.yaml")
    lc = cfg["learning_check"]
    out = tmp_path_factory.mktemp("learning")
    data = learning.write_toy_dataset(out / "data", lc["toy"]["n_train"], lc["toy"]["n_val"], cfg["seed"])
    build_tiny_model(
        out / "tiny", learning.toy_corpus(cfg["seed"]), vocab_size=lc["toy"]["vocab_size"], seed=cfg["seed"]
    )
    # two runs at a time: a run keeps about one core busy (tests/conftest.py::shared_ray has a slot for each)
    with shared_ray.joined(), ThreadPoolExecutor(max_workers=shared_ray.slots) as pool:
        futures = {
            check: pool.submit(
                learning.run_direction_check,
                cfg,
                check,
                train_files=data["train"],
                val_files=data["val"],
                init_model=str(out / "tiny"),
                run_dir=out / check,
            )
            for check in learning.CHECKS
        }
        verdicts = {check: f.result() for check, f in futures.items()}
    return out, verdicts


@pytest.mark.slow
@pytest.mark.parametrize("check", list(learning.LOSSES))
def test_each_loss_raises_the_toy_reward(toy_runs, check):
    out, verdicts = toy_runs
    v = verdicts[check]
    assert v["passed"], f"{check}: reward {v['first']:.3f} -> {v['last']:.3f} (curve {v['curve']})"
    assert v["delta"] > v["margin"] > 0
    # the run went through verl's reward manager with the registry's toy reward: its components are logged
    rows = [json.loads(line) for line in (out / check / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert all("reward/target_share/mean" in r for r in rows if r.get("step", 0) > 0)
    assert json.loads((out / check / "verdict.json").read_text())["passed"] is True


@pytest.mark.slow
def test_sign_flipped_control_lowers_the_toy_reward(toy_runs):
    _, verdicts = toy_runs
    v = verdicts[learning.CONTROL]
    assert v["expect"] == "down" and v["passed"], f"reward {v['first']:.3f} -> {v['last']:.3f}"
    assert v["delta"] < -v["margin"]
    # and judged by the learning criterion, the broken loss fails it
    assert not learning.judge(v["curve"], "up", v["k"], v["margin"])["passed"]


@pytest.fixture(scope="module")
def curriculum_run(tmp_path_factory, shared_ray):
    cfg = load_config(REPO / "config.yaml")
    out = tmp_path_factory.mktemp("curriculum")
    with shared_ray.joined():
        return out, learning.run_curriculum_check(cfg, out_dir=out)


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


@pytest.mark.slow
def test_learning_report_page(toy_runs, curriculum_run, tmp_path):
    _, verdicts = toy_runs
    _, cur = curriculum_run
    ok = learning.write_report(
        verdicts, cur, tmp_path / "report.md", tmp_path / "rewards.png", tmp_path / "timeline.png"
    )
    assert ok
    md = (tmp_path / "report.md").read_text()
    assert "not paper results" in md
    for check in learning.CHECKS:
        assert f"| {check} |" in md
    assert md.count("| pass |") == len(learning.CHECKS)
    assert (tmp_path / "rewards.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"

"""Direction checks of the learning checks (codegrpo.learning.direction, docs/learning.md): training moves the
toy reward the right way.

Fast tests: the toy reward through the registry, the verdict rules, the test-only sign-flip hook of the policy
losses, the launch of each check, the target's plan.

Slow tests (run in CI): real GRPO runs on CPU through the pipeline's verl path (Hydra-validated launch, Ray,
FSDP2, HF rollout, the reward registry and verl's naive reward manager) on the toy task, one per policy loss and
one sign-flipped control (tests/learning/conftest.py::toy_runs, once for the package).
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from codegrpo import learning
from codegrpo.config import load_config
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

"""The verl adapter of DHRCL (codegrpo.verl.dhrcl): variants, and the launch of a run composed with verl's Hydra
config."""

from __future__ import annotations

import json

import pytest

from codegrpo.config import load_config
from codegrpo.runsettings import SETTINGS_ENV
from codegrpo.verl import dhrcl as vd
from codegrpo.verl import dhrcl_curriculum as dc
from tests.verl import dhrcl_launch_at


def test_variants_map_to_reward_loss_and_curriculum():
    full = vd.resolve_variant({}, "full")
    assert (full["reward"], vd.loss_mode(full["token_weights"]), full["curriculum"]) == ("full", "dhrcl", "trend")
    assert vd.loss_mode(vd.resolve_variant({}, "uniform_weights")["token_weights"]) == "dhrcl_uniform"
    assert vd.loss_mode(vd.resolve_variant({}, "baseline_pass_rate")["token_weights"]) == "vanilla"
    nc = vd.resolve_variant({}, "no_curriculum")
    assert nc["stage"] == 3 and vd.loss_mode(nc["token_weights"]) == "dhrcl_uncertainty"
    with pytest.raises(ValueError, match="unknown variant"):
        vd.resolve_variant({}, "nope")
    with pytest.raises(ValueError, match="fixed stage"):
        vd.resolve_variant({"variants": {"x": {"reward": "full", "token_weights": "stage", "curriculum": "none"}}}, "x")
    fixed = vd.curriculum_config(
        {"curriculum": {"fixed_schedule_fraction": [0.2, 0.5], "window": 3}},
        vd.resolve_variant({}, "fixed_schedule"),
        100,
    )
    assert fixed.forced_schedule == (20, 50) and fixed.window == 3


@pytest.mark.parametrize(
    "variant,loss", [("full", "dhrcl"), ("baseline_pass_rate", "vanilla"), ("uniform_weights", "dhrcl_uniform")]
)
def test_launch_composes_with_hydra(repo_root, tmp_path, variant, loss):
    cfg = load_config(repo_root / "config.yaml")
    launch = dhrcl_launch_at(cfg, variant, tmp_path)
    hc = launch.validate()
    assert hc.trainer.experiment_name == f"dhrcl-{variant}"
    assert hc.actor_rollout_ref.actor.policy_loss.loss_mode == loss
    assert hc.reward_model.reward_manager == "batch" and hc.custom_reward_function.name == "compute_score_batch"
    settings = json.loads((tmp_path / f"dhrcl-{variant}" / "settings.json").read_text())["settings"]
    assert settings["extra"]["scorer"]["variant"] == vd.resolve_variant({}, variant)["reward"]
    assert hc.trainer.val_before_train and hc.trainer.test_freq == cfg["dhrcl"]["curriculum"]["eval_every"]
    assert list(hc.codegrpo.validate_callbacks) == ["codegrpo.verl.dhrcl_curriculum:on_validate"]
    assert (hc.actor_rollout_ref.model.get("external_lib") == "codegrpo.verl.losses") == (loss != "vanilla")
    assert hc.data.dataloader_num_workers == 0  # CPU mode: no DataLoader worker processes (they outlive the run)
    settings = json.loads((tmp_path / f"dhrcl-{variant}" / "settings.json").read_text())["settings"]
    assert launch.env[SETTINGS_ENV].endswith("settings.json") and settings["extra"]["variant"] == variant
    assert hc.actor_rollout_ref.actor.kl_loss_coef == cfg["dhrcl"]["training"]["kl_coef"]
    assert dc.load_settings(launch.env[SETTINGS_ENV])["variant"] == variant
    # the sandbox limits reach the reward through settings.json, not through variables of their own
    assert settings["sandbox"]["wall_s"] == cfg["sandbox"]["wall_s"]
    assert [k for k in launch.env if k.startswith("CODEGRPO_")] == [SETTINGS_ENV]


def test_seeded_run_name_and_seed(repo_root, tmp_path):
    """A run of dhrcl.seeds: dhrcl-<variant>-seed<seed>, trained with that seed (recorded in settings.json)."""
    cfg = load_config(repo_root / "config.yaml")
    assert vd.run_name("full") == "dhrcl-full" and vd.run_name("no_ast", 2) == "dhrcl-no_ast-seed2"
    launch = dhrcl_launch_at(cfg, "full", tmp_path, "dhrcl-full-seed2", seed=2)
    hc = launch.validate()
    assert hc.trainer.experiment_name == "dhrcl-full-seed2" and hc.data.seed == 2
    assert hc.actor_rollout_ref.rollout.seed == 2  # vLLM's sampling seed differs per seed, not only data order
    settings = json.loads((tmp_path / "dhrcl-full-seed2" / "settings.json").read_text())["settings"]
    assert settings["seed"] == 2 and settings["run"] == "dhrcl-full-seed2" and cfg["seed"] == 0

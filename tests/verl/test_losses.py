"""DHRCL policy losses in verl 0.4.1's registry, against verl's own compute_policy_loss."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from codegrpo.verl.stages import SETTINGS_ENV
from tests.verl import dhrcl_launch_at
import torch
from omegaconf import OmegaConf

from verl.trainer.ppo import core_algos

import codegrpo.verl.losses as losses
from codegrpo.credit import token_weights

torch.manual_seed(0)
B, T = 3, 5
OLD = torch.log(torch.rand(B, T) * 0.9 + 0.05)
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.float32)
ADV = torch.tensor([1.3, -0.8, 0.4]).unsqueeze(-1) * MASK
CFG = OmegaConf.create(
    {
        "clip_ratio": 0.2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.28,
        "clip_ratio_c": 3.0,
        "policy_loss": {"loss_mode": "dhrcl", "dhrcl_tau": 1.0, "dhrcl_w_min": 0.25, "dhrcl_w_max": 4.0},
    }
)


def _new():
    return (OLD + 0.3 * torch.randn(B, T)).requires_grad_(True)


def _verl(logp, adv, agg="token-mean"):
    return core_algos.compute_policy_loss(
        old_log_prob=OLD,
        log_prob=logp,
        advantages=adv,
        response_mask=MASK,
        cliprange=0.2,
        cliprange_low=0.2,
        cliprange_high=0.28,
        clip_ratio_c=3.0,
        loss_agg_mode=agg,
    )


def test_external_lib_import_registers_every_loss_and_keeps_verls():
    """What a verl actor worker does with ``model.external_lib=codegrpo.verl.losses``, in a fresh interpreter.

    Catches a loss name (e.g. one a variant's ``loss_mode`` selects) that importing the module does not register
    (the worker would fail at its first update), a registration that only happens in the driver or in tests, and
    a name that overwrites one of verl's own losses.
    """
    code = (
        "import json\n"
        "from verl.trainer.ppo import core_algos\n"
        "from verl.utils.import_utils import import_external_libs\n"
        "before = dict(core_algos.POLICY_LOSS_REGISTRY)\n"
        "import_external_libs('codegrpo.verl.losses')\n"
        "after = core_algos.POLICY_LOSS_REGISTRY\n"
        "print(json.dumps({'added': {k: f.__module__ for k, f in after.items() if k not in before},\n"
        "                  'verl_kept': sorted(k for k, f in before.items() if after.get(k) is f),\n"
        "                  'verl': sorted(before)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["added"] == {name: "codegrpo.verl.losses" for name in losses.LOSS_NAMES}
    assert got["verl_kept"] == got["verl"] and got["verl"], "a codegrpo loss replaced one of verl's"


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_uniform_equals_plain_grpo(agg):
    logp = _new()
    fn = core_algos.get_policy_loss_fn("dhrcl_uniform")
    got = fn(OLD, logp, ADV, MASK, agg, CFG)
    ref = _verl(logp, ADV, agg)
    assert len(got) == 4
    for a, b in zip(got, ref):
        assert torch.allclose(a, b)


@pytest.mark.parametrize("mode", ["confidence", "uncertainty"])
def test_weighted_modes_equal_verl_on_weighted_advantages(mode):
    logp = _new()
    got = core_algos.get_policy_loss_fn(f"dhrcl_{mode}")(OLD, logp, ADV, MASK, "token-mean", CFG)
    w = token_weights(OLD, MASK, mode)
    ref = _verl(logp, ADV * w)
    assert torch.allclose(got[0], ref[0])
    assert not torch.allclose(got[0], _verl(logp, ADV)[0])  # the weighting changes the loss


def test_gradient_flows_only_through_log_prob():
    old = OLD.clone().requires_grad_(True)
    logp = _new()
    adv = ADV.clone().requires_grad_(True)
    loss = core_algos.get_policy_loss_fn("dhrcl_confidence")(old, logp, adv, MASK, "token-mean", CFG)[0]
    loss.backward()
    assert logp.grad is not None and logp.grad.abs().sum() > 0
    # old_log_prob reaches the loss only through the (detached) weights and the ratio; verl's ratio uses it too,
    # so compare with plain GRPO: the weights add no gradient path to old_log_prob
    old2 = OLD.clone().requires_grad_(True)
    logp2 = logp.detach().clone().requires_grad_(True)
    w = token_weights(OLD, MASK, "confidence")
    ref = core_algos.compute_policy_loss(
        old_log_prob=old2,
        log_prob=logp2,
        advantages=(ADV * w),
        response_mask=MASK,
        cliprange=0.2,
        cliprange_low=0.2,
        cliprange_high=0.28,
        clip_ratio_c=3.0,
    )[0]
    ref.backward()
    assert torch.allclose(old.grad, old2.grad) and torch.allclose(logp.grad, logp2.grad)


def test_stage_following_loss_reads_stage(monkeypatch):
    logp = _new()
    fn = core_algos.get_policy_loss_fn("dhrcl")
    for stage, mode in ((1, "confidence"), (2, "uniform"), (3, "uncertainty")):
        monkeypatch.setattr(losses, "_stage", lambda s=stage: s)
        got = fn(OLD, logp, ADV, MASK, "token-mean", CFG)[0]
        ref = core_algos.get_policy_loss_fn(f"dhrcl_{mode}")(OLD, logp, ADV, MASK, "token-mean", CFG)[0]
        assert torch.allclose(got, ref)


def test_stage_from_env_without_ray(monkeypatch):
    import ray

    assert not ray.is_initialized()
    monkeypatch.setenv("CODEGRPO_DHRCL_STAGE", "3")
    assert losses._stage() == 3


def test_weighting_params_from_config():
    cfg = OmegaConf.create({"clip_ratio": 0.2, "policy_loss": {"dhrcl_tau": 2.0, "dhrcl_w_max": 3.0}})
    assert losses.weighting_params(cfg) == {"tau": 2.0, "w_min": 0.25, "w_max": 3.0}
    assert losses.weighting_params(None) == {"tau": 1.0, "w_min": 0.25, "w_max": 4.0}


# ---- verl adapter of DHRCL (codegrpo.verl.dhrcl) ------------------------------------------------------------
from types import SimpleNamespace  # noqa: E402

from codegrpo.config import load_config  # noqa: E402
from codegrpo.verl import dhrcl as vd  # noqa: E402


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


def test_validation_components_pick_the_largest_n():
    m = {
        "val-aux/kodcode/r_exec/mean@1": 0.1,
        "val-aux/kodcode/r_exec/mean@4": 0.4,
        "val-aux/kodcode/r_exec/std@4": 9.0,
        "val-core/kodcode/reward/mean@4": 2.0,
        "val-aux/other/r_syntax/mean@1": 7.0,
    }
    assert vd.validation_components(m) == {"r_exec": 0.4, "reward": 2.0}


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
    assert list(hc.codegrpo.validate_callbacks) == ["codegrpo.verl.dhrcl:on_validate"]
    assert (hc.actor_rollout_ref.model.get("external_lib") == "codegrpo.verl.losses") == (loss != "vanilla")
    assert hc.data.dataloader_num_workers == 0  # CPU mode: no DataLoader worker processes (they outlive the run)
    settings = json.loads((tmp_path / f"dhrcl-{variant}" / "settings.json").read_text())["settings"]
    assert launch.env[SETTINGS_ENV].endswith("settings.json") and settings["extra"]["variant"] == variant
    assert hc.actor_rollout_ref.actor.kl_loss_coef == cfg["dhrcl"]["training"]["kl_coef"]
    assert vd.load_settings(launch.env[SETTINGS_ENV])["variant"] == variant
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


@pytest.mark.slow
def test_on_validate_drives_stage_actor_and_resumes(tmp_path, monkeypatch):
    """Real local Ray: the named actor carries the stage, state is saved and restored after a 'restart'."""
    import ray

    from codegrpo.rewards import dhrcl as reward

    run_dir = tmp_path / "dhrcl-full"
    run_dir.mkdir()
    ccfg = {"total_steps": 100, "eval_every": 1, "window": 2, "patience": 1, "min_steps": 0}
    settings = {
        "variant": "full",
        "variant_def": vd.resolve_variant({}, "full"),
        "run_dir": str(run_dir),
        "curriculum": ccfg,
    }
    (run_dir / "settings.json").write_text(json.dumps({"settings": {"extra": settings}}))
    monkeypatch.setenv(SETTINGS_ENV, str(run_dir / "settings.json"))

    def val(step, syn, exe):
        trainer = SimpleNamespace(global_steps=step)
        return vd.on_validate(
            trainer,
            {
                "val-aux/kodcode/r_syntax/mean@1": syn,
                "val-aux/kodcode/r_exec/mean@1": exe,
                "val-aux/kodcode/r_pass/mean@1": 0.0,
            },
        )

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        monkeypatch.setattr(vd, "_STATE", None)
        monkeypatch.setattr(vd, "_HANDLE", None)
        monkeypatch.setattr(vd, "_READ_HANDLE", None)
        with pytest.raises(RuntimeError, match="not found"):  # inside Ray, no silent stage 1
            vd.current_stage()
        assert val(0, 0.5, 0.1)["curriculum/stage"] == 1.0
        assert vd.current_stage() == 1 and reward._STAGE_PROVIDER is vd.current_stage
        m = val(1, 0.5, 0.1)  # flat window of 2 -> plateau -> stage 2
        assert m["curriculum/stage"] == 2.0 and m["curriculum/advanced"] == 1.0
        assert vd.current_stage() == 2
        # another reader (as the workers do) sees the same actor
        assert ray.get(ray.get_actor(vd.STATE_ACTOR_NAME).get.remote()) == 2
        assert vd.on_step(SimpleNamespace(global_steps=1), 1, {"x": 1.0})["dhrcl/stage"] == 2.0
        val(2, 0.5, 0.3)
        saved = json.loads((run_dir / "curriculum.json").read_text())
        assert saved["stage"] == 2 and [h["step"] for h in saved["history"]] == [0, 1, 2]
        # "restart" resuming from a checkpoint at step 1: state restored, step 1 re-validated
        monkeypatch.setattr(vd, "_STATE", None)
        vd._HANDLE and ray.get(vd._HANDLE.set.remote(1))
        m = val(1, 0.5, 0.1)
        assert vd._STATE.controller.transitions[0]["step"] == 1 and vd.current_stage() == 2
        assert [h["step"] for h in vd._STATE.controller.history] == [0, 1]
    finally:
        reward.set_stage_provider(None)
        monkeypatch.setattr(vd, "_HANDLE", None)
        monkeypatch.setattr(vd, "_READ_HANDLE", None)
        ray.shutdown()

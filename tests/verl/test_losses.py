"""DHRCL policy losses in verl 0.4.1's registry, against verl's own compute_policy_loss."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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

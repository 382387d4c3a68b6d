"""DHRCL token weights on hand-built tensors."""

from __future__ import annotations

import math

import pytest
import torch

from codegrpo.credit import mode_for_stage, token_weights, weighted_advantages

P = torch.tensor([[0.9, 0.5, 0.1, 0.7], [0.2, 0.4, 0.6, 0.8]], dtype=torch.float32)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float32)
LOGP = P.log()


def _valid_mean(w, mask):
    return (w * mask).sum(-1) / mask.sum(-1)


@pytest.mark.parametrize("mode", ["confidence", "uniform", "uncertainty"])
def test_mean_one_over_valid_tokens_and_zero_on_padding(mode):
    w = token_weights(LOGP, MASK, mode)
    assert torch.allclose(_valid_mean(w, MASK), torch.ones(2))
    assert w[0, 3] == 0
    assert w.dtype == LOGP.dtype and not w.requires_grad


def test_hand_computed_values():
    w = token_weights(LOGP, MASK, "confidence", w_min=0.1)
    assert torch.allclose(w[0, :3], torch.tensor([0.9, 0.5, 0.1]) / 0.5, atol=1e-6)  # [1.8, 1.0, 0.2]
    w = token_weights(LOGP, MASK, "uncertainty", w_min=0.1)
    assert torch.allclose(w[0, :3], torch.tensor([0.1, 0.5, 0.9]) / 0.5, atol=1e-6)
    # with the default w_min = 0.25 the 0.2 is lifted to 0.25 and the row renormalised to mean 1
    w = token_weights(LOGP, MASK, "confidence")
    c = torch.tensor([1.8, 1.0, 0.25])
    assert torch.allclose(w[0, :3], c / c.mean(), atol=1e-6)
    assert torch.equal(token_weights(LOGP, MASK, "uniform"), MASK)
    w = token_weights(LOGP, MASK, "confidence", tau=2.0, w_min=0.01)
    s = torch.tensor([0.81, 0.25, 0.01])
    assert torch.allclose(w[0, :3], s / s.mean(), atol=1e-6)


def test_clipping_then_renormalising():
    # one very likely token among unlikely ones: raw confidence weight 0.97/0.2425 = 4.0 -> fine; use a sharper case
    p = torch.tensor([[0.999, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001]])
    mask = torch.ones_like(p)
    w = token_weights(p.log(), mask, "confidence", w_min=0.25, w_max=4.0)
    raw = p / p.mean()
    assert raw[0, 0] > 4 and raw[0, 1] < 0.25  # both clips are active
    clipped = raw.clamp(0.25, 4.0)
    expect = clipped / clipped.mean()
    assert torch.allclose(w, expect, atol=1e-6)
    assert math.isclose(float(w.mean()), 1.0, rel_tol=1e-6)


def test_degenerate_scores_fall_back_to_uniform():
    logp = torch.zeros(1, 3)  # p = 1 everywhere: (1 - p) = 0
    w = token_weights(logp, torch.ones(1, 3), "uncertainty")
    assert torch.allclose(w, torch.ones(1, 3))
    w = token_weights(logp, torch.zeros(1, 3), "confidence")  # no valid token
    assert torch.equal(w, torch.zeros(1, 3))


def test_sign_handling_same_weights_for_positive_and_negative_advantages():
    adv_pos = torch.full((2, 4), 0.7) * MASK
    adv_neg = -adv_pos
    for mode in ("confidence", "uncertainty"):
        wp = weighted_advantages(adv_pos, LOGP, MASK, mode)
        wn = weighted_advantages(adv_neg, LOGP, MASK, mode)
        assert torch.allclose(wp, -wn)
        w = token_weights(LOGP, MASK, mode)
        assert torch.allclose(wp, 0.7 * w)
        # the sequence's total advantage is preserved
        assert torch.allclose((wp * MASK).sum(-1), (adv_pos * MASK).sum(-1))


def test_weights_carry_no_gradient():
    logp = LOGP.clone().requires_grad_(True)
    w = token_weights(logp, MASK, "confidence")
    assert not w.requires_grad


def test_stage_modes_and_errors():
    assert [mode_for_stage(s) for s in (1, 2, 3)] == ["confidence", "uniform", "uncertainty"]
    with pytest.raises(ValueError):
        mode_for_stage(4)
    with pytest.raises(ValueError, match="unknown"):
        token_weights(LOGP, MASK, "sharp")
    with pytest.raises(ValueError, match="shape"):
        token_weights(LOGP, MASK[:, :3], "uniform")
    with pytest.raises(ValueError, match="w_min"):
        token_weights(LOGP, MASK, "uniform", w_min=2.0)

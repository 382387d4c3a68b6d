"""DHRCL token credit redistribution (pure torch).

``p_t`` is the probability of the sampled token under the rollout (old) policy, ``exp(old_log_prob)``.

* stage 1 ``confidence``: ``s_t = p_t ** tau`` (consolidate established patterns)
* stage 2 ``uniform``: ``s_t = 1``
* stage 3 ``uncertainty``: ``s_t = (1 - p_t) ** tau`` (refine less-established decisions)

``w_t = s_t / mean(s)`` over the response's valid tokens, clipped to ``[w_min, w_max]`` and renormalised to
mean 1 over the response, without gradient; the token advantage is ``w_t * A_i`` whatever the sign of ``A_i``.
Padding positions get weight 0. A response whose scores are all zero (e.g. ``uncertainty`` with every
``p_t = 1``) falls back to uniform weights.
"""

from __future__ import annotations

import torch

MODES = ("confidence", "uniform", "uncertainty")
STAGE_MODES = {1: "confidence", 2: "uniform", 3: "uncertainty"}


def mode_for_stage(stage: int) -> str:
    try:
        return STAGE_MODES[int(stage)]
    except (KeyError, ValueError, TypeError):
        raise ValueError(f"DHRCL stage must be 1, 2 or 3, got {stage!r}") from None


def token_weights(
    old_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    mode: str = "uniform",
    tau: float = 1.0,
    w_min: float = 0.25,
    w_max: float = 4.0,
) -> torch.Tensor:
    """Per-token weights ``[batch, resp_len]`` with mean 1 over each response's valid tokens (detached)."""
    if mode not in MODES:
        raise ValueError(f"unknown DHRCL token weighting {mode!r}; one of {', '.join(MODES)}")
    if old_log_prob.shape != response_mask.shape:
        raise ValueError(
            f"old_log_prob {tuple(old_log_prob.shape)} and response_mask {tuple(response_mask.shape)} differ in shape"
        )
    if not (0 < w_min <= 1 <= w_max):
        raise ValueError(f"need 0 < w_min <= 1 <= w_max, got w_min={w_min}, w_max={w_max}")
    with torch.no_grad():
        mask = response_mask.detach().to(torch.float64)
        p = old_log_prob.detach().to(torch.float64).exp().clamp(0.0, 1.0)
        if mode == "confidence":
            s = p.pow(tau)
        elif mode == "uncertainty":
            s = (1.0 - p).pow(tau)
        else:
            s = torch.ones_like(p)
        s = s * mask
        n = mask.sum(-1, keepdim=True)
        total = s.sum(-1, keepdim=True)
        degenerate = total <= 0
        s = torch.where(degenerate, mask, s)
        total = torch.where(degenerate, n, total)
        w = s * n / total.clamp_min(1e-12)
        w = w.clamp(w_min, w_max) * mask
        w = w * n / w.sum(-1, keepdim=True).clamp_min(1e-12)
        w = w * mask
    return w.to(old_log_prob.dtype)


def weighted_advantages(
    advantages: torch.Tensor, old_log_prob: torch.Tensor, response_mask: torch.Tensor, mode: str, **kw
) -> torch.Tensor:
    """``A_{i,t} = w_t * A_i`` (the same weights for positive and negative advantages)."""
    return advantages * token_weights(old_log_prob, response_mask, mode, **kw)

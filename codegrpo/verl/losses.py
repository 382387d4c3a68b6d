"""DHRCL policy losses registered in verl 0.4.1's policy-loss registry.

Load in the actor workers with ``actor_rollout_ref.model.external_lib=codegrpo.verl.losses`` and select with
``actor_rollout_ref.actor.policy_loss.loss_mode=<name>``:

* ``dhrcl_confidence`` / ``dhrcl_uniform`` / ``dhrcl_uncertainty``: fixed token weighting
  (:func:`codegrpo.credit.token_weights`);
* ``dhrcl``: follows the curriculum stage (1 confidence, 2 uniform, 3 uncertainty), read from the shared stage
  actor (:func:`codegrpo.verl.dhrcl_curriculum.current_stage`), else ``CODEGRPO_DHRCL_STAGE``, else 1.

Each computes ``w_t`` from ``old_log_prob`` (detached), multiplies the GRPO advantages and calls verl's own
clipped objective ``compute_policy_loss`` (so clipping, dual clip and ``loss_agg_mode`` stay verl's), returning
verl 0.4.1's 4-tuple ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``.

Test-only hook (the learning checks, :mod:`codegrpo.learning`): ``sign_flipped_vanilla`` is verl's vanilla
GRPO objective with the advantage's sign flipped, a deliberately broken loss that must *lower* the reward; and
``+actor_rollout_ref.actor.policy_loss.codegrpo_test_flip_sign=true`` flips the sign inside the DHRCL losses.
No pipeline stage sets either.

Weighting settings come from ``actor_rollout_ref.actor.policy_loss`` (0.4.1 keeps it a plain DictConfig, so
``+actor_rollout_ref.actor.policy_loss.dhrcl_tau=1.0`` etc. reach the loss): ``dhrcl_tau``, ``dhrcl_w_min``,
``dhrcl_w_max``.
"""

from __future__ import annotations

from typing import Callable

from verl.trainer.ppo import core_algos

from codegrpo.credit import mode_for_stage, token_weights

SIGN_FLIPPED = "sign_flipped_vanilla"
FLIP_KEY = "codegrpo_test_flip_sign"
LOSS_NAMES = ("dhrcl", "dhrcl_confidence", "dhrcl_uniform", "dhrcl_uncertainty", SIGN_FLIPPED)


def _get(cfg, key, default):
    if cfg is None:
        return default
    try:
        val = cfg.get(key, default)
    except AttributeError:
        val = getattr(cfg, key, default)
    return default if val is None else val


def weighting_params(config) -> dict:
    pl = _get(config, "policy_loss", None)
    return {
        "tau": float(_get(pl, "dhrcl_tau", 1.0)),
        "w_min": float(_get(pl, "dhrcl_w_min", 0.25)),
        "w_max": float(_get(pl, "dhrcl_w_max", 4.0)),
    }


def _stage() -> int:
    from codegrpo.verl.dhrcl_curriculum import current_stage  # the Ray stage actor; CODEGRPO_DHRCL_STAGE outside Ray

    return int(current_stage())


def weighted_policy_loss(
    mode: str, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean", config=None
):
    """verl's clipped policy loss with DHRCL token-weighted advantages (the 0.4.1 4-tuple)."""
    w = token_weights(old_log_prob, response_mask, mode, **weighting_params(config))
    if _get(_get(config, "policy_loss", None), FLIP_KEY, False):
        w = -w
    return _clipped(old_log_prob, log_prob, advantages * w, response_mask, loss_agg_mode, config)


def _clipped(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config):
    """verl's own clipped objective with the clip settings of the actor config."""
    clip = float(_get(config, "clip_ratio", 0.2))
    return core_algos.compute_policy_loss(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        cliprange=clip,
        cliprange_low=float(_get(config, "clip_ratio_low", clip)),
        cliprange_high=float(_get(config, "clip_ratio_high", clip)),
        clip_ratio_c=float(_get(config, "clip_ratio_c", 3.0)),
        loss_agg_mode=loss_agg_mode,
    )


def _fixed(mode: str) -> Callable:
    def loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None):
        return weighted_policy_loss(mode, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config)

    loss.__name__ = f"dhrcl_{mode}_policy_loss"
    return loss


def dhrcl_stage_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None):
    return weighted_policy_loss(
        mode_for_stage(_stage()), old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config
    )


def sign_flipped_policy_loss(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None
):
    """Test-only: verl's vanilla objective on ``-advantages`` (a broken loss the learning checks must catch)."""
    return _clipped(old_log_prob, log_prob, -advantages, response_mask, loss_agg_mode, config)


def register() -> None:
    """(Re-)register the DHRCL losses; idempotent."""
    core_algos.register_policy_loss("dhrcl")(dhrcl_stage_policy_loss)
    for mode in ("confidence", "uniform", "uncertainty"):
        core_algos.register_policy_loss(f"dhrcl_{mode}")(_fixed(mode))
    core_algos.register_policy_loss(SIGN_FLIPPED)(sign_flipped_policy_loss)


register()

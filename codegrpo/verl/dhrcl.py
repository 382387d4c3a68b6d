"""DHRCL on verl 0.4.1: variants, run settings and overrides, and the run launcher.

How a DHRCL run is wired (all through the project trainer's plug-in hook, docs/training.md):

* reward: ``reward_model.reward_manager=batch`` with the registry's ``compute_score_batch`` (data_source
  ``kodcode`` → :mod:`codegrpo.rewards.dhrcl`); the variant and the reward settings arrive through the run's
  settings.json (``extra``, :func:`dhrcl_settings`);
* curriculum: the trainer callbacks of :mod:`codegrpo.verl.dhrcl_curriculum` (after every validation and every
  step), which also publish the stage to the reward and the actor workers;
* the policy loss of the variant's token weights (:func:`loss_mode`, :mod:`codegrpo.verl.losses`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.contracts import chat_template_kwargs
from codegrpo.curriculum import CurriculumConfig, CurriculumController

log = logging.getLogger(__name__)

STATE_FILE = "curriculum.json"
CURRICULUM_MODULE = "codegrpo.verl.dhrcl_curriculum"  # the trainer callbacks of a DHRCL run
COMPONENTS = ("r_syntax", "r_exec", "r_pass", "r_ast")

# Built-in variants (the config's dhrcl.variants may add or override entries).
#   reward: the reward variant of codegrpo.rewards.dhrcl
#   token_weights: stage (follow the curriculum), confidence | uniform | uncertainty (fixed), none (plain GRPO)
#   curriculum: trend (the controller), fixed (forced schedule), none (constant stage)
#   norm_adv_by_std (optional, default true): GRPO's std normalisation of the group advantage (VeRPO: false)
DEFAULT_VARIANTS: dict[str, dict[str, Any]] = {
    "full": {"reward": "full", "token_weights": "stage", "curriculum": "trend"},
    "no_ast": {"reward": "no_ast", "token_weights": "stage", "curriculum": "trend"},
    "no_curriculum": {"reward": "no_curriculum", "token_weights": "uncertainty", "curriculum": "none", "stage": 3},
    "fixed_schedule": {"reward": "full", "token_weights": "stage", "curriculum": "fixed"},
    "uniform_weights": {"reward": "uniform_weights", "token_weights": "uniform", "curriculum": "trend"},
    "baseline_binary": {"reward": "binary", "token_weights": "none", "curriculum": "none"},
    "baseline_pass_rate": {"reward": "pass_rate", "token_weights": "none", "curriculum": "none"},
    "baseline_static_dense": {"reward": "static_dense", "token_weights": "none", "curriculum": "none"},
    "baseline_acecoder": {"reward": "reward_model", "token_weights": "none", "curriculum": "none"},
    # VeRPO (arXiv 2601.03525): A = A_traj + beta * A_turn, group-mean baseline without std normalisation
    "baseline_verpo": {"reward": "verpo", "token_weights": "none", "curriculum": "none", "norm_adv_by_std": False},
}


BASELINE_REWARDS = ("binary", "pass_rate", "static_dense", "reward_model", "verpo")


def run_name(variant: str, seed: int | None = None, model: str | None = None) -> str:
    """``dhrcl-<variant>``, or with a seed the per-seed run ``dhrcl-<variant>-seed<seed>`` (the pipeline's runs);
    with a model of ``dhrcl.models``, ``dhrcl-<model>-<variant>-seed<seed>`` (one folder per model size)."""
    base = f"dhrcl-{variant}" if model is None else f"dhrcl-{model}-{variant}"
    return base if seed is None else f"{base}-seed{int(seed)}"


def model_entries(dcfg: Mapping[str, Any]) -> list[dict]:
    """The models of the DHRCL runs: ``dhrcl.models`` (name, init, training overrides), or the one model
    ``dhrcl.init`` (name None: run names without a model, as before the list existed)."""
    models = list(dcfg.get("models") or [])
    if not models:
        return [{"name": None, "init": dcfg.get("init", "base"), "training": {}, "runs": None}]
    names = [m["name"] for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"dhrcl.models: model names must be unique, got {names}")
    known = set((dcfg.get("training") or {}).keys())
    out = []
    for i, m in enumerate(models):
        bad = sorted(set(m.get("training") or {}) - known) if known else []
        if bad:
            raise ValueError(
                f"dhrcl.models[{i}] ({m['name']}).training: unknown key(s) {bad}; the keys are those of dhrcl.training"
            )
        out.append(
            {"name": m["name"], "init": m["init"], "training": dict(m.get("training") or {}), "runs": m.get("runs")}
        )
    return out


def model_cfg(cfg: Mapping[str, Any], model: str | None, variant: str | None = None) -> dict:
    """The config of model ``model``'s runs: ``dhrcl.init`` its init, ``dhrcl.training`` with its overrides; for
    a ``variant`` that scores with a reward model, ``dhrcl.reward_model.training`` laid over those (room on the GPU
    for the RM's server)."""
    out = dict(cfg)
    if model is not None:
        dcfg = cfg["dhrcl"]
        entry = next((m for m in model_entries(dcfg) if m["name"] == model), None)
        if entry is None:
            raise ValueError(f"dhrcl: unknown model {model!r}; configured: {[m['name'] for m in model_entries(dcfg)]}")
        out["dhrcl"] = {**dcfg, "init": entry["init"], "training": {**dcfg["training"], **entry["training"]}}
    if variant is not None:
        d = out["dhrcl"]
        rm_training = dict((d.get("reward_model") or {}).get("training") or {})
        if rm_training and resolve_variant(d, variant)["reward"] == "reward_model":
            bad = sorted(set(rm_training) - set(d["training"]))
            if bad:
                raise ValueError(
                    f"dhrcl.reward_model.training: unknown key(s) {bad}; the keys are those of dhrcl.training"
                )
            out["dhrcl"] = {**d, "training": {**d["training"], **rm_training}}
    return out


def plan_runs(cfg: Mapping[str, Any], seeds: Sequence[int] | None = None) -> dict[str, dict]:
    """Every DHRCL run of the config (at ``seeds``, default ``dhrcl.seeds``): name -> variant, seed, model, init."""
    dcfg = cfg["dhrcl"]
    out = {}
    for m in model_entries(dcfg):
        for v in dcfg["runs"] if m["runs"] is None else m["runs"]:
            for s in dcfg["seeds"] if seeds is None else seeds:
                out[run_name(v, s, m["name"])] = {"variant": v, "seed": int(s), "model": m["name"], "init": m["init"]}
    return out


def _seeded(cfg: Mapping[str, Any], seed: int | None) -> Mapping[str, Any]:
    """The config of one seed's run: ``seed`` (verl's trainer.seed and data.seed) set to the run's seed."""
    return cfg if seed is None else {**cfg, "seed": int(seed)}


def resolve_variant(dcfg: Mapping[str, Any], variant: str) -> dict[str, Any]:
    variants = {**DEFAULT_VARIANTS, **{k: dict(v) for k, v in (dcfg.get("variants") or {}).items()}}
    if variant not in variants:
        raise ValueError(f"dhrcl: unknown variant {variant!r}; defined: {', '.join(sorted(variants))}")
    v = {"stage": None, "norm_adv_by_std": True, **variants[variant]}
    if not isinstance(v["norm_adv_by_std"], bool):
        raise ValueError(
            f"dhrcl.variants.{variant}.norm_adv_by_std must be true or false, got {v['norm_adv_by_std']!r}"
        )
    if v["curriculum"] not in ("trend", "fixed", "none"):
        raise ValueError(f"dhrcl.variants.{variant}.curriculum must be trend, fixed or none, got {v['curriculum']!r}")
    if v["token_weights"] not in ("stage", "confidence", "uniform", "uncertainty", "none"):
        raise ValueError(f"dhrcl.variants.{variant}.token_weights invalid: {v['token_weights']!r}")
    staged = v["reward"] not in BASELINE_REWARDS or v["token_weights"] == "stage"
    if v["curriculum"] == "none" and staged and v["stage"] not in (1, 2, 3):
        raise ValueError(
            f"dhrcl.variants.{variant}: without a curriculum a staged reward or token weighting "
            "needs a fixed stage (1, 2 or 3)"
        )
    return v


TINY_REWARD_MODEL = "tiny"  # dhrcl.reward_model.model: the offline tiny RM the workflow builds (rule tiny_reward_model)


def uses_reward_model(dcfg: Mapping[str, Any], variant: str) -> bool:
    """Variant ``variant`` scores with the learned reward model (``dhrcl.reward_model``)."""
    return resolve_variant(dcfg, variant)["reward"] == "reward_model"


def needs_tiny_reward_model(dcfg: Mapping[str, Any], variant: str) -> bool:
    """The variant's reward model is the tiny one the workflow builds (``dhrcl.reward_model.model: tiny``)."""
    return uses_reward_model(dcfg, variant) and (dcfg.get("reward_model") or {}).get("model") == TINY_REWARD_MODEL


def with_reward_model(cfg: Mapping[str, Any], path: str | os.PathLike) -> dict:
    """``cfg`` with ``dhrcl.reward_model.model`` set to the folder ``path`` (the built tiny RM)."""
    d = dict(cfg["dhrcl"])
    d["reward_model"] = {**dict(d.get("reward_model") or {}), "model": str(Path(path).resolve())}
    return {**cfg, "dhrcl": d}


def loss_mode(token_weights: str) -> str:
    if token_weights == "none":
        return "vanilla"
    if token_weights == "stage":
        return "dhrcl"
    return f"dhrcl_{token_weights}"


def token_weight_mode(variant_def: Mapping[str, Any], stage: int) -> str:
    """The token weighting a run applies in ``stage``: the stage's mode when it follows the curriculum
    (1 confidence, 2 uniform, 3 uncertainty), else the variant's fixed mode (``none``: plain GRPO)."""
    from codegrpo.credit import mode_for_stage

    tw = variant_def["token_weights"]
    if tw != "stage":
        return tw
    return mode_for_stage(stage) if stage in (1, 2, 3) else "none"


def curriculum_config(dcfg: Mapping[str, Any], variant_def: Mapping[str, Any], total_steps: int) -> CurriculumConfig:
    c = dict(dcfg.get("curriculum") or {})
    fixed_fraction = c.pop("fixed_schedule_fraction", [0.3, 0.3])
    forced = None
    if variant_def["curriculum"] == "fixed":
        forced = [max(1, int(round(f * total_steps))) for f in fixed_fraction]
    keep = {k: v for k, v in c.items() if k in CurriculumConfig.__dataclass_fields__}
    return CurriculumConfig(total_steps=total_steps, forced_schedule=forced, **keep)


# ---------------------------------------------------------------------------------------------------------
# Launching a run (Snakemake job process)
# ---------------------------------------------------------------------------------------------------------
def _resolved(dcfg: Mapping[str, Any], key: str) -> dict:
    """``dhrcl.<key>`` over its schema defaults (a validated config already carries them all)."""
    from codegrpo.runsettings import schema_defaults

    return {**schema_defaults("dhrcl", key), **dict(dcfg.get(key) or {})}


def scorer_settings(dcfg: Mapping[str, Any], variant_def: Mapping[str, Any], tokenizer_path: str | None) -> dict:
    """The KodCode scorer's settings of a run (the fields of ``codegrpo.rewards.dhrcl.DHRCLRewardConfig``),
    resolved once over the schema's defaults and stored under ``extra.scorer`` in the run's settings.json, where
    the scorer reads them in verl's reward worker (``DHRCLRewardConfig.resolve``)."""
    r = _resolved(dcfg, "reward")
    out = {
        "variant": variant_def["reward"],
        "stage3_form": r["stage3_form"],
        "ast_method": r["ast_method"],
        "ast_node_cap": int(r["ast_node_cap"]),
        "timeout_s": float(r["timeout_s"]),
        "static_weights": {k: float(v) for k, v in (r["static_weights"] or {}).items()},
    }
    if variant_def["reward"] == "reward_model":
        out["rm_response"] = _resolved(dcfg, "reward_model")["response"]
    if variant_def["reward"] == "verpo":
        out["verpo"] = dict(r.get("verpo") or {})
    if r["use_policy_tokenizer"] and tokenizer_path:
        out["tokenizer_path"] = str(tokenizer_path)
    return out


def dhrcl_settings(cfg: Mapping[str, Any], variant: str, run_dir: Path, init_model: str | None = None) -> dict:
    """The DHRCL part of run ``dhrcl-<variant>``'s settings.json (``extra``): read back by :func:`on_validate`
    and, under ``scorer``, by the KodCode scorer in verl's reward worker (``init_model``: the policy whose
    tokenizer the AST component may use)."""
    dcfg = cfg["dhrcl"]
    vdef = resolve_variant(dcfg, variant)
    total = int(dcfg["training"]["total_training_steps"] or 0)
    if total <= 0:
        raise ValueError("dhrcl.training.total_training_steps must be set (the curriculum's step budget)")
    ccfg = curriculum_config(dcfg, vdef, total)
    out = {
        "variant": variant,
        "variant_def": vdef,
        "run_dir": str(run_dir),
        "curriculum": CurriculumController(ccfg).to_dict()["config"],
        "reward": _resolved(dcfg, "reward"),
        "token_weights": _resolved(dcfg, "token_weights"),
        "scorer": scorer_settings(dcfg, vdef, init_model),
    }
    if vdef["reward"] == "reward_model":  # the run starts the RM's scoring server (grpo_settings.run_services)
        rm = _resolved(dcfg, "reward_model")
        if not rm.get("model"):
            raise ValueError(
                f"dhrcl: variant {variant!r} scores with a reward model, but dhrcl.reward_model.model "
                "is not set (a hub id such as TIGER-Lab/AceCodeRM-7B, or a folder)"
            )
        if rm["model"] == TINY_REWARD_MODEL:
            raise ValueError(
                "dhrcl.reward_model.model: tiny is the folder rule tiny_reward_model builds; pass its "
                "path (codegrpo.verl.dhrcl.with_reward_model)"
            )
        out["reward_model"] = rm
    return out


def dhrcl_overrides(cfg: Mapping[str, Any], settings: Mapping[str, Any]) -> list[str]:
    """verl overrides of a DHRCL run (appended after those of the ``dhrcl.training`` section)."""
    from codegrpo.verl.launch import fmt

    vdef = settings["variant_def"]
    ccfg = CurriculumConfig.from_dict(settings["curriculum"])
    tw = settings["token_weights"]
    ar = "actor_rollout_ref"
    ov = [
        f"trainer.test_freq={ccfg.eval_every}",
        "trainer.val_before_train=true",
        "reward_model.reward_manager=batch",
        "custom_reward_function.name=compute_score_batch",
        f"{ar}.actor.policy_loss.loss_mode={loss_mode(vdef['token_weights'])}",
        f"+{ar}.actor.policy_loss.dhrcl_tau={fmt(float(tw['tau']))}",
        f"+{ar}.actor.policy_loss.dhrcl_w_min={fmt(float(tw['w_min']))}",
        f"+{ar}.actor.policy_loss.dhrcl_w_max={fmt(float(tw['w_max']))}",
        f"codegrpo.validate_callbacks={fmt([CURRICULUM_MODULE + ':on_validate'])}",
        f"codegrpo.step_callbacks={fmt([CURRICULUM_MODULE + ':on_step'])}",
        f"codegrpo.chat_template_kwargs={fmt(chat_template_kwargs(cfg))}",
    ]
    if not vdef.get("norm_adv_by_std", True):  # VeRPO: the group-mean baseline without std normalisation
        ov.append("algorithm.norm_adv_by_std_in_grpo=false")
    if vdef["token_weights"] != "none":
        ov.append(f"{ar}.model.external_lib=codegrpo.verl.losses")
    if cfg["device"] == "cpu":
        # verl's default of 8 DataLoader worker processes per loader: on CPU they only compete for the cores, and
        # they are left running (about 0.5 GB each) when Ray kills the TaskRunner at the end of a run
        ov.append("+data.dataloader_num_workers=0")
    return ov


class DhrclHook:
    """DHRCL's additions to the GRPO lifecycle of :func:`codegrpo.verl.stages.run_grpo`: its settings (variant,
    curriculum), its overrides (loss, callbacks, reward kwargs) and the curriculum transitions in done.json."""

    def __init__(self, variant: str):
        self.variant = variant

    def settings(self, cfg, section, run_dir: Path, init_model: str) -> dict:
        self.cfg = cfg
        return dhrcl_settings(cfg, self.variant, Path(run_dir), init_model)

    def overrides(self, settings: Mapping[str, Any], run_dir: Path) -> list[str]:
        return dhrcl_overrides(self.cfg, settings["extra"])

    def finish(self, run_dir: Path) -> dict:
        state = Path(run_dir) / STATE_FILE
        return {
            "variant": self.variant,
            "transitions": json.loads(state.read_text())["transitions"] if state.is_file() else [],
        }


def dhrcl_launch(
    cfg: Mapping[str, Any], variant: str, *, seed: int | None = None, model: str | None = None, **inputs: Any
):
    """The GRPO launch :func:`run_dhrcl` makes from the same arguments (``inputs``: its ``train_files``,
    ``val_files``, ``init_model`` and ``run_dir``), writing the run's settings.json; validate it with
    ``.validate()``."""
    from codegrpo.verl import grpo_settings as grpo

    cfg = _seeded(model_cfg(cfg, model, variant), seed)
    hook = DhrclHook(variant)
    run_dir = Path(inputs.pop("run_dir")).resolve()
    settings = grpo.run_settings(
        cfg, cfg["dhrcl"]["training"], run_name(variant, seed, model), run_dir=run_dir, hook=hook, **inputs
    )
    grpo.prepare_run_dir(run_dir, settings)
    return grpo.settings_launch(cfg, settings, run_dir, hook=hook)


def run_dhrcl(
    cfg: Mapping[str, Any], variant: str, *, seed: int | None = None, model: str | None = None, **inputs: Any
) -> dict:
    """Train run ``dhrcl-<variant>`` with GRPO on KodCode (the shared lifecycle
    :func:`codegrpo.verl.stages.run_grpo` with :class:`DhrclHook`, ``inputs``: its ``train_files``,
    ``val_files``, ``init_model`` and ``run_dir``); returns its done.json record.
    With ``seed``, the run is ``dhrcl-<variant>-seed<seed>`` and trains with that seed (config ``seed``:
    verl's trainer and data seeds; recorded in settings.json).

    Run folder: ``settings.json`` (resolved settings, DHRCL's under ``extra``), ``config.json``,
    ``curriculum.json`` (controller state), ``checkpoints/``, ``train.log``, ``metrics.jsonl``, ``hf/``,
    ``finished.json`` and ``done.json`` (written last).
    """
    from codegrpo.verl.stages import run_grpo

    cfg = _seeded(model_cfg(cfg, model, variant), seed)
    return run_grpo(cfg, cfg["dhrcl"]["training"], run_name(variant, seed, model), hook=DhrclHook(variant), **inputs)

"""DHRCL on verl 0.4.1: variants, the curriculum in the trainer, the shared stage, and the run launcher.

How a DHRCL run is wired (all through the project trainer's plug-in hook, docs/training.md):

* reward: ``reward_model.reward_manager=batch`` with the registry's ``compute_score_batch`` (data_source
  ``kodcode`` → :mod:`codegrpo.rewards.dhrcl`); the variant and the reward settings arrive as
  ``custom_reward_function.reward_kwargs``;
* curriculum: ``codegrpo.validate_callbacks`` runs :func:`on_validate` after every validation in the TaskRunner
  process. It feeds the validation means of ``r_syntax`` / ``r_exec`` / ``r_pass`` to a
  :class:`codegrpo.curriculum.CurriculumController`, saves its state to ``<run_dir>/curriculum.json`` after every
  decision, and publishes the stage through a Ray named actor (:class:`CurriculumState`);
* the stage is read by the reward (same process: a stage provider installed in :mod:`codegrpo.rewards.dhrcl`)
  and by the stage-following policy loss ``dhrcl`` in the actor workers (:func:`current_stage`);
* resume: verl resumes from its newest checkpoint and validates first (``val_before_train`` is forced on for
  DHRCL runs); the first :func:`on_validate` restores ``curriculum.json``, forgets what was observed after the
  checkpoint step, and re-publishes the stage before any training step;
* per-step metrics: the trainer logs every reward component as ``reward/<key>/mean`` (``score``, ``r_*``,
  ``a_*``, ``stage``); :func:`on_step` adds ``dhrcl/stage`` and the curriculum's last decision.

The Ray pitfall handled here: a non-detached named actor disappears with its last handle, after which
``get_if_exists`` silently creates a fresh one (stage 1 again), so the driver keeps its handle in a module global
for the whole run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.contracts import KODCODE, chat_template_kwargs
from codegrpo.curriculum import CurriculumConfig, CurriculumController

log = logging.getLogger(__name__)

STATE_ACTOR_NAME = "codegrpo_dhrcl_curriculum"
STATE_FILE = "curriculum.json"
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
# The shared stage (Ray named actor)
# ---------------------------------------------------------------------------------------------------------
_HANDLE = None  # the driver's handle: keeps the actor alive for the whole run
_READ_HANDLE = None  # a reader's cached handle (reward process, workers)
_ACTOR_CLS = None


def _actor_class():
    global _ACTOR_CLS
    if _ACTOR_CLS is None:
        import ray

        @ray.remote(num_cpus=0)
        class CurriculumState:
            """The current stage, shared by the driver (writer), the reward and the actor workers (readers)."""

            def __init__(self, stage: int = 1):
                self.stage = int(stage)
                self.updated = time.time()

            def get(self) -> int:
                return self.stage

            def set(self, stage: int) -> int:
                self.stage = int(stage)
                self.updated = time.time()
                return self.stage

        _ACTOR_CLS = CurriculumState
    return _ACTOR_CLS


def publish_stage(stage: int) -> None:
    """Create (once) the named actor in this process and set the stage; the handle stays referenced here."""
    import ray

    global _HANDLE
    if _HANDLE is None:
        _HANDLE = _actor_class().options(name=STATE_ACTOR_NAME, get_if_exists=True).remote(int(stage))
    ray.get(_HANDLE.set.remote(int(stage)))


def current_stage() -> int:
    """The published stage, from any process of the Ray job (driver, reward, actor workers).

    Outside Ray (unit tests, a plain process) it is ``CODEGRPO_DHRCL_STAGE`` or 1. Inside Ray a missing actor is
    an error rather than a silent stage 1: DHRCL runs validate before training, which creates it.
    """
    global _READ_HANDLE
    import ray

    if not ray.is_initialized():
        return int(os.environ.get("CODEGRPO_DHRCL_STAGE", "1"))
    handle = _HANDLE or _READ_HANDLE
    if handle is None:
        try:
            handle = _READ_HANDLE = ray.get_actor(STATE_ACTOR_NAME)
        except ValueError as exc:
            raise RuntimeError(
                f"DHRCL stage actor {STATE_ACTOR_NAME!r} not found in this Ray job (it is created by "
                "the first validation; DHRCL runs need trainer.val_before_train=true)"
            ) from exc
    return int(ray.get(handle.get.remote()))


# ---------------------------------------------------------------------------------------------------------
# Trainer callbacks (TaskRunner process)
# ---------------------------------------------------------------------------------------------------------
class _RunState:
    def __init__(self, settings: dict):
        self.settings = settings
        self.run_dir = Path(settings["run_dir"])
        self.variant = settings["variant_def"]
        self.controller: CurriculumController | None = None
        self.last: dict[str, Any] = {}


_STATE: _RunState | None = None
_VAL_KEY = re.compile(r"^val-(?:core|aux)/(?P<ds>[^/]+)/(?P<key>[^/]+)/mean@(?P<n>\d+)$")


def load_settings(path: str | os.PathLike | None = None) -> dict:
    """DHRCL's settings of the running run (``extra`` of its settings.json, named by ``$CODEGRPO_RUN_SETTINGS``)."""
    from codegrpo.verl.stages import load_run_settings

    return load_run_settings(path)["extra"]


def validation_components(metrics: Mapping[str, float], data_source: str = KODCODE) -> dict[str, float]:
    """``val-*/<data_source>/<component>/mean@N`` → ``{component: value}`` (largest N when several)."""
    best: dict[str, tuple[int, float]] = {}
    for k, v in metrics.items():
        m = _VAL_KEY.match(k)
        if m and m.group("ds") == data_source:
            n = int(m.group("n"))
            if m.group("key") not in best or n > best[m.group("key")][0]:
                best[m.group("key")] = (n, float(v))
    return {k: v for k, (_, v) in best.items()}


def _init_state(step: int) -> _RunState:
    """First validation of this process: restore or create the controller and publish the stage."""
    from codegrpo.rewards import dhrcl as reward

    st = _RunState(load_settings())
    path = st.run_dir / STATE_FILE
    cfg = CurriculumConfig.from_dict(st.settings["curriculum"])
    if path.is_file():
        st.controller = CurriculumController.load(path)
        st.controller.config = cfg
        st.controller.rewind(step - 1)  # the resumed step is validated again now
        log.info("dhrcl: restored %s at step %d: stage %d", path, step, st.controller.stage)
    else:
        st.controller = CurriculumController(cfg)
    publish_stage(_effective_stage(st))
    reward.set_stage_provider(current_stage)
    return st


def _effective_stage(st: _RunState) -> int:
    if st.variant["curriculum"] == "none":
        return int(st.variant.get("stage") or 0)  # 0: no stage (baselines ignore it)
    return st.controller.stage


def on_validate(trainer, metrics: dict) -> dict:
    """Validate callback: feed the controller, persist its state, publish the stage, add curriculum metrics."""
    global _STATE
    step = int(getattr(trainer, "global_steps", 0))
    if _STATE is None:
        _STATE = _init_state(step)
    st = _STATE
    comps = validation_components(metrics)
    out = dict(metrics)
    if st.variant["curriculum"] != "none":
        decision = st.controller.observe(step, comps)
        decision.check["token_weights"] = token_weight_mode(st.variant, decision.check["stage"])
        if decision.advanced:
            st.controller.transitions[-1]["token_weights"] = {
                "from": token_weight_mode(st.variant, decision.stage - 1),
                "to": token_weight_mode(st.variant, decision.stage),
            }
        st.controller.save(st.run_dir / STATE_FILE)
        publish_stage(decision.stage)
        check = decision.check
        st.last = {
            "curriculum/advanced": float(decision.advanced),
            "curriculum/plateau_count": float(check.get("plateau_count") or 0),
        }
        if check.get("slope") is not None:
            st.last["curriculum/slope"] = float(check["slope"])
        if check.get("value") is not None:
            st.last["curriculum/metric"] = float(check["value"])
        if decision.advanced:
            log.info("dhrcl: step %d: stage %d (%s)", step, decision.stage, decision.reason)
    else:
        st.controller.history.append(
            {
                "step": step,
                "stage": _effective_stage(st),
                "metric": None,
                "value": None,
                **{f"val_{k}": v for k, v in comps.items()},
            }
        )
        st.controller.save(st.run_dir / STATE_FILE)
    out["curriculum/stage"] = float(_effective_stage(st))
    out.update(st.last)
    return out


def on_step(trainer, step: int, metrics: dict) -> dict:
    """Step callback: the stage in force after this step (the reward used ``reward/stage/mean``)."""
    out = dict(metrics)
    if _STATE is not None:
        out["dhrcl/stage"] = float(_effective_stage(_STATE))
        out.update({k: v for k, v in _STATE.last.items() if k not in out})
    return out


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
    if vdef["reward"] == "reward_model":  # the run starts the RM's scoring server (stages.run_services)
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


def dhrcl_overrides(cfg: Mapping[str, Any], settings: Mapping[str, Any], init_model: str) -> list[str]:
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
        f"codegrpo.validate_callbacks={fmt(['codegrpo.verl.dhrcl:on_validate'])}",
        f"codegrpo.step_callbacks={fmt(['codegrpo.verl.dhrcl:on_step'])}",
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
        self.cfg, self.init_model = cfg, init_model
        return dhrcl_settings(cfg, self.variant, Path(run_dir), init_model)

    def overrides(self, settings: Mapping[str, Any], run_dir: Path) -> list[str]:
        return dhrcl_overrides(self.cfg, settings["extra"], self.init_model)

    def finish(self, run_dir: Path) -> dict:
        state = Path(run_dir) / STATE_FILE
        return {
            "variant": self.variant,
            "transitions": json.loads(state.read_text())["transitions"] if state.is_file() else [],
        }


def dhrcl_launch(
    cfg: Mapping[str, Any],
    variant: str,
    *,
    train_files: Sequence[str] | str,
    val_files: Sequence[str] | str,
    init_model: str,
    run_dir: str | os.PathLike,
    seed: int | None = None,
    model: str | None = None,
):
    """The GRPO launch of run ``dhrcl-<variant>`` (``-seed<seed>`` with a seed, ``dhrcl-<model>-...`` with a
    model of ``dhrcl.models``), writing its settings.json (validate with ``.validate()``)."""
    from codegrpo.verl import stages

    cfg = _seeded(model_cfg(cfg, model, variant), seed)
    hook = DhrclHook(variant)
    run_dir = Path(run_dir).resolve()
    settings = stages.run_settings(
        cfg,
        cfg["dhrcl"]["training"],
        run_name(variant, seed, model),
        train_files=train_files,
        val_files=val_files,
        init_model=init_model,
        run_dir=run_dir,
        hook=hook,
    )
    stages.prepare_run_dir(run_dir, settings)
    return stages.settings_launch(cfg, settings, run_dir, hook=hook)


def run_dhrcl(
    cfg: Mapping[str, Any],
    variant: str,
    *,
    train_files: Sequence[str] | str,
    val_files: Sequence[str] | str,
    init_model: str,
    run_dir: str | os.PathLike,
    seed: int | None = None,
    model: str | None = None,
) -> dict:
    """Train run ``dhrcl-<variant>`` with GRPO on KodCode (the shared lifecycle
    :func:`codegrpo.verl.stages.run_grpo` with :class:`DhrclHook`); returns its done.json record.
    With ``seed``, the run is ``dhrcl-<variant>-seed<seed>`` and trains with that seed (config ``seed``:
    verl's trainer and data seeds; recorded in settings.json).

    Run folder: ``settings.json`` (resolved settings, DHRCL's under ``extra``), ``config.json``,
    ``curriculum.json`` (controller state), ``checkpoints/``, ``train.log``, ``metrics.jsonl``, ``hf/``,
    ``finished.json`` and ``done.json`` (written last).
    """
    from codegrpo.verl.stages import run_grpo

    cfg = _seeded(model_cfg(cfg, model, variant), seed)
    return run_grpo(
        cfg,
        cfg["dhrcl"]["training"],
        run_name(variant, seed, model),
        train_files=train_files,
        val_files=val_files,
        init_model=init_model,
        run_dir=run_dir,
        hook=DhrclHook(variant),
    )

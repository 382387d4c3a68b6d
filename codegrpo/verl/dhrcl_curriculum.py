"""The DHRCL curriculum inside verl's trainer: the shared stage and the trainer callbacks (docs/dhrcl.md).

* curriculum: ``codegrpo.validate_callbacks`` runs :func:`on_validate` after every validation in the TaskRunner
  process. It feeds the validation means of ``r_syntax`` / ``r_exec`` / ``r_pass`` to a
  :class:`codegrpo.curriculum.CurriculumController`, saves its state to ``<run_dir>/curriculum.json`` after every
  decision, and publishes the stage through a Ray named actor (``CurriculumState``);
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

import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Mapping

from codegrpo.contracts import KODCODE
from codegrpo.curriculum import CurriculumConfig, CurriculumController
from codegrpo.verl.dhrcl import STATE_FILE, token_weight_mode

log = logging.getLogger(__name__)

STATE_ACTOR_NAME = "codegrpo_dhrcl_curriculum"


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
    from codegrpo.verl.grpo_settings import load_run_settings

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

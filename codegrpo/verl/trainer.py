"""The project TaskRunner and RayPPOTrainer subclass (verl 0.4.1), with the plug-in hook.

The GRPO driver (:mod:`codegrpo.verl.driver`) starts verl's TaskRunner role as a Ray actor; in that actor's
process :class:`ProjectTaskRunner` runs verl's own ``TaskRunner.run`` with the trainer class swapped for
:class:`ProjectTrainer`. Only that process (and verl's workers) import this module, and with it verl.

Plug-in hook (the contract other stages build on; see docs/training.md):

* ``codegrpo.plugins``: modules imported in the driver (TaskRunner) process before the trainer is built, e.g.
  to register an advantage estimator or create a shared Ray actor. Worker-side code (policy losses) is imported
  in the workers by verl's own ``actor_rollout_ref.model.external_lib``.
* ``codegrpo.validate_callbacks``: ``"pkg.mod:fn"``, called as ``fn(trainer, metrics)`` after every validation
  with verl's validation metrics dict; a returned dict replaces it (e.g. adds ``curriculum/stage``).
* ``codegrpo.step_callbacks``: ``"pkg.mod:fn"``, called as ``fn(trainer, step, metrics)`` once per logged
  step (step 0 is the validation before training) before the metrics reach the loggers; a returned dict
  replaces them.
* State that must survive a resume is the plug-in's to save: ``trainer.global_steps`` and
  ``trainer.config.trainer.default_local_dir`` identify the checkpoint being written; callbacks run in the
  TaskRunner process, which lives for the whole run.

Per-step metrics: every logged step goes to ``codegrpo.metrics_file`` (see :mod:`codegrpo.verl.metrics`), with
the training rewards' components added as ``reward/<key>/mean`` (verl 0.4.1 logs them only for validation), the
share of GRPO groups whose rewards are all equal (``dynamics/degenerate_group_ratio``) and the step's cost
(``perf/step_s`` from verl's own ``timing_s/step``, ``perf/gpu_hours`` = that x the job's GPUs / 3600).
"""

from __future__ import annotations

import importlib
import os
from collections import defaultdict

import ray

import verl.trainer.main_ppo as main_ppo
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from codegrpo.verl.driver import WORKERS_FILE
from codegrpo.verl.metrics import DEGENERATE_KEY, degenerate_group_ratio, step_cost, tracking_class


def resolve_callable(spec: str):
    """``"pkg.mod:fn"`` or ``"pkg.mod.fn"`` → the function (clear error when it does not exist)."""
    mod_name, sep, attr = spec.partition(":")
    if not sep:
        mod_name, _, attr = spec.rpartition(".")
    if not mod_name or not attr:
        raise ValueError(f"callback {spec!r}: expected 'package.module:function'")
    try:
        fn = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"callback {spec!r} cannot be loaded: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"callback {spec!r} is not callable")
    return fn


class _RewardRecorder:
    """Wraps verl's reward manager to keep the mean of every reward component of the current training step."""

    def __init__(self, inner):
        self.inner = inner
        self.pending: dict[str, list[float]] = defaultdict(list)
        self.degenerate: list[float] = []

    def __call__(self, data, return_dict: bool = False):
        out = self.inner(data, return_dict=True)
        uids = getattr(data, "non_tensor_batch", {}).get("uid")
        if uids is not None:  # GRPO groups: the share whose rewards are all equal (no learning signal)
            ratio = degenerate_group_ratio(out["reward_tensor"].sum(-1).tolist(), list(uids))
            if ratio is not None:
                self.degenerate.append(ratio)
        for key, values in (out.get("reward_extra_info") or {}).items():
            for v in values:
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.pending[key].append(float(v))
                elif isinstance(v, bool):
                    self.pending[key].append(float(v))
        return out if return_dict else out["reward_tensor"]

    def pop_metrics(self) -> dict[str, float]:
        out = {f"reward/{k}/mean": sum(v) / len(v) for k, v in self.pending.items() if v}
        if self.degenerate:
            out[DEGENERATE_KEY] = sum(self.degenerate) / len(self.degenerate)
        self.pending.clear()
        self.degenerate.clear()
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _where(worker) -> dict:
    """Run inside a training worker (``__ray_call__``): the Ray node, host and process it lives in."""
    import socket

    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "rank": int(os.environ.get("RANK", -1)),
    }


def record_workers(trainer, path) -> list[dict]:
    """Write where each actor/rollout worker of ``trainer`` runs (rank, Ray node, host, pid) to ``path``."""
    from codegrpo.io import write_json

    where = ray.get([w.__ray_call__.remote(_where) for w in trainer.actor_rollout_wg.workers])
    # which Ray: its GCS address (as Ray reports it: the node's IP, the port of the Ray the driver started or
    # joined: the pipeline's local Ray, the tests' shared Ray, a SLURM job's cluster)
    ray_info = {"gcs_address": ray.get_runtime_context().gcs_address}
    write_json(
        path, {"world_size": len(where), "nodes": len({w["node_id"] for w in where}), "workers": where, "ray": ray_info}
    )
    return where


def ensure_epochs(config, batches_per_epoch: int) -> int:
    """Raise ``trainer.total_epochs`` so that verl's loop (``for epoch in range(total_epochs)`` over a loader of
    ``batches_per_epoch`` batches) reaches ``trainer.total_training_steps``: without it the loop ends with the
    epochs, ``is_last_step`` is never true, and the final save and validation never happen. Returns the epochs."""
    from omegaconf import open_dict

    from codegrpo.budget import epochs_for_steps

    need = epochs_for_steps(
        config.trainer.total_training_steps, int(batches_per_epoch), int(config.trainer.total_epochs)
    )
    if need != int(config.trainer.total_epochs):
        print(
            f"[codegrpo] trainer.total_epochs {config.trainer.total_epochs} -> {need}: {batches_per_epoch} "
            f"batches per epoch, {config.trainer.total_training_steps} steps",
            flush=True,
        )
        with open_dict(config):
            config.trainer.total_epochs = need
    return need


class ProjectTrainer(RayPPOTrainer):
    """verl's RayPPOTrainer plus callbacks, reward-component metrics, the metrics file and ``workers.json`` (where
    each training worker runs, in the run folder)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        pc = self.config.get("codegrpo", {}) or {}
        self.validate_callbacks = [resolve_callable(s) for s in pc.get("validate_callbacks", []) or []]
        self.step_callbacks = [resolve_callable(s) for s in pc.get("step_callbacks", []) or []]
        self.metrics_file = pc.get("metrics_file")
        if self.reward_fn is not None:
            self.reward_fn = _RewardRecorder(self.reward_fn)

    def _create_dataloader(self, *args, **kwargs):
        super()._create_dataloader(*args, **kwargs)
        # the loader's real length (after verl's filter_overlong_prompts): enough epochs for the step budget
        ensure_epochs(self.config, len(self.train_dataloader))

    def init_workers(self):
        super().init_workers()
        run_dir = (self.config.get("codegrpo", {}) or {}).get("run_dir")
        if run_dir:
            record_workers(self, os.path.join(run_dir, WORKERS_FILE))

    def _validate(self):
        metrics = super()._validate()
        for cb in self.validate_callbacks:
            out = cb(self, metrics)
            if isinstance(out, dict):
                metrics = out
        return metrics

    def _before_log(self, step: int, data: dict) -> dict:
        if isinstance(self.reward_fn, _RewardRecorder):
            data.update(self.reward_fn.pop_metrics())
        data.update(step_cost(data, int(self.config.trainer.n_gpus_per_node) * int(self.config.trainer.nnodes)))
        for cb in self.step_callbacks:
            out = cb(self, step, data)
            if isinstance(out, dict):
                data = out
        return data

    def fit(self):
        # fit() builds its logger with `from verl.utils.tracking import Tracking`: offer the project subclass
        import verl.utils.tracking as tracking

        original = tracking.Tracking
        tracking.Tracking = tracking_class(self.metrics_file, before_log=self._before_log)
        try:
            return super().fit()
        finally:
            tracking.Tracking = original


def patch_driver_tokenizer(kwargs: dict) -> None:
    """Make ``verl.utils.hf_tokenizer`` return tokenizers whose ``apply_chat_template`` passes ``kwargs``.

    verl 0.4.1's ``TaskRunner.run`` builds the tokenizer that templates every dataset prompt (and filters the
    overlong ones) with ``from verl.utils import hf_tokenizer``; the evaluation templates its prompts with the
    same switches (``codegrpo.contracts.chat_template_kwargs``, e.g. Qwen3's ``enable_thinking``). verl's
    ``custom_chat_template`` reaches only the workers' tokenizers, not the dataset's."""
    import verl.utils

    from codegrpo.contracts import with_template_kwargs

    base = getattr(verl.utils.hf_tokenizer, "_codegrpo_base", verl.utils.hf_tokenizer)
    if not kwargs:
        verl.utils.hf_tokenizer = base
        return

    def hf_tokenizer(*args, **kw):
        return with_template_kwargs(base(*args, **kw), kwargs)

    hf_tokenizer._codegrpo_base = base
    verl.utils.hf_tokenizer = hf_tokenizer


class ProjectTaskRunner(main_ppo.TaskRunner.__ray_actor_class__):
    """verl's TaskRunner with :class:`ProjectTrainer` and the configured driver plug-ins. It runs in the TaskRunner
    actor's process (:class:`codegrpo.verl.driver.TaskRunner`), as verl's runs in its ``TaskRunner`` actor."""

    def run(self, config):
        from codegrpo.verl.prompts import install

        # the prompt format RLHFDataset renders in this process (model.chat_template)
        install(config.get("codegrpo", {}).get("chat_template"))
        for mod in config.get("codegrpo", {}).get("plugins", []) or []:
            importlib.import_module(mod)
        patch_driver_tokenizer(dict(config.get("codegrpo", {}).get("chat_template_kwargs") or {}))
        # TaskRunner.run looks RayPPOTrainer up in the globals of its own function object
        super().run.__func__.__globals__["RayPPOTrainer"] = ProjectTrainer
        return super().run(config)

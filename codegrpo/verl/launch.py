"""Pipeline config → verl launches (SFT with ``fsdp_sft_trainer``, GRPO with ``main_ppo``), validated by Hydra.

Each stage's section of the pipeline config (``sft``, ``skeleton_rl``, ``skin_rl``) holds the knobs users tune;
this module maps them to verl 0.4.1 override strings and layers them over the project Hydra configs in
``codegrpo/verl/config`` (which themselves extend verl's ``ppo_trainer.yaml`` / ``sft_trainer.yaml``). Every
launch is composed with Hydra before it runs (:meth:`Launch.validate`), so a misspelled key fails at once with
Hydra's message instead of minutes into a cluster job.

Command lines:

* SFT: ``torchrun --nnodes=N --nproc_per_node=G -m codegrpo.verl.sft_main <overrides>``
* GRPO: ``python -m codegrpo.verl.driver <overrides>`` (the project driver: Ray + project TaskRunner)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence


PROJECT_CONFIG_DIR = Path(__file__).resolve().parent / "config"
REWARD_ENTRY = Path(__file__).resolve().parent / "reward_entry.py"
SFT_RUNS = ("skeleton", "skin")


class LaunchConfigError(ValueError):
    """A generated command line does not compose against verl's config (the message names the override)."""


def verl_config_dir() -> Path:
    """verl's own Hydra config folder, located without importing verl."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("verl is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


_SAFE = re.compile(r"^[A-Za-z0-9_./:@+\-~]+$")


def fmt(value: Any) -> str:
    """A Python value as a Hydra override value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{fmt(v)}" for k, v in value.items()) + "}"
    s = str(value)
    if _SAFE.match(s) and s not in ("null", "true", "false"):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Hydra's compose API keeps one global instance per process: launches prepared from several threads (e.g. the
# learning checks run two at a time) compose one after the other
_COMPOSE_LOCK = threading.Lock()


def compose(config_name: str, overrides: Sequence[str], config_dir: str | os.PathLike = PROJECT_CONFIG_DIR):
    """Compose ``config_name`` with ``overrides`` exactly as the entry point will; resolve interpolations.
    Safe to call from several threads (one compose at a time).

    verl's own configs (``ppo_trainer.yaml``, ``sft_trainer.yaml``) are found on Hydra's search path, set here to
    the installed verl's config folder by its path (:func:`verl_config_dir`): composing does not import verl, so
    neither the GRPO driver nor the launch's validation pays verl's import (a few CPU-seconds each).

    Raises :class:`LaunchConfigError` naming the offending override when Hydra or OmegaConf rejects it.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with _COMPOSE_LOCK, initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None):
            search = f"hydra.searchpath={fmt(['file://' + str(verl_config_dir())])}"
            cfg = hydra_compose(config_name=config_name, overrides=[*overrides, search])
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as exc:
        cause = exc.__cause__
        detail = " ".join(f"{exc} {cause or ''}".split())
        raise LaunchConfigError(f"{config_name}: verl config rejected the command line: {detail}") from exc
    return cfg


@dataclasses.dataclass
class Launch:
    """One training launch: the command, its environment additions and the Hydra config it composes."""

    kind: str  # "sft" | "grpo"
    run: str
    config_name: str
    overrides: list[str]
    argv_prefix: list[str]
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    # inherited variables (name prefixes) the command must not see: a GRPO run's settings reach its workers only
    # through its settings.json, so the documented overrides of the reward settings are dropped
    drop_env: tuple[str, ...] = ()

    @property
    def argv(self) -> list[str]:
        return [*self.argv_prefix, *self.overrides]

    def command(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.argv)

    def process_env(self, environ=None) -> dict[str, str]:
        """The command's environment: ``environ`` (default ``os.environ``) less :attr:`drop_env`, plus :attr:`env`."""
        environ = os.environ if environ is None else environ
        kept = {k: v for k, v in environ.items() if not (self.drop_env and k.startswith(self.drop_env))}
        return {**kept, **self.env}

    def validate(self):
        """Compose the launch's config (no training, no verl import beyond Hydra's search path)."""
        return compose(self.config_name, self.overrides)

    def run_process(self, log_file: str | os.PathLike, cwd: str | os.PathLike | None = None) -> int:
        """Validate, then run the command with stdout/stderr appended to ``log_file``; return its exit code."""
        self.validate()
        env = self.process_env()
        log_file = Path(log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "a", encoding="utf-8") as fh:
            fh.write(f"\n# {time.strftime('%Y-%m-%dT%H:%M:%S')} launch {self.run}\n# {self.command()}\n")
            fh.flush()
            proc = subprocess.run(self.argv, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT)
        return proc.returncode


# ----------------------------------------------------------------------------------------------------------
# building the overrides


def _common_env(device: str) -> dict[str, str]:
    env = {"TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    if device == "cpu":
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return env


def sft_launch(
    cfg: dict,
    which: str,
    *,
    train_files: Sequence[str] | str,
    val_files: Sequence[str] | str,
    model_path: str,
    run_dir: str | os.PathLike,
    chat_template: str | None = None,
) -> Launch:
    """The SFT launch of run ``sft_<which>`` (which = skeleton | skin) from the pipeline config.

    ``chat_template``: the resolved ``model.chat_template`` (:mod:`codegrpo.verl.prompts`)."""
    if which not in SFT_RUNS:
        raise ValueError(f"unknown SFT run {which!r}; expected one of {SFT_RUNS}")
    s = cfg["sft"]
    device = cfg["device"]
    run = f"sft_{which}"
    run_dir = Path(run_dir).resolve()
    n_gpus = 1 if device == "cpu" else s["n_gpus_per_node"]
    nnodes = 1 if device == "cpu" else s["nnodes"]
    ov = {
        "data.train_files": _files(train_files),
        "data.val_files": _files(val_files),
        "data.train_batch_size": s["train_batch_size"],
        "data.micro_batch_size_per_gpu": s["micro_batch_size_per_gpu"],
        "data.max_length": s["max_length"],
        "data.truncation": s["truncation"],
        "model.partial_pretrain": model_path,
        "model.enable_gradient_checkpointing": s["gradient_checkpointing"],
        "model.fsdp_config.cpu_offload": s["offload"],
        "model.fsdp_config.offload_params": s["offload"],
        "optim.lr": s["lr"],
        "optim.lr_scheduler": s["lr_scheduler"],
        "optim.warmup_steps_ratio": s["warmup_steps_ratio"],
        "optim.weight_decay": s["weight_decay"],
        "trainer.default_local_dir": str(run_dir / "checkpoints"),
        "trainer.project_name": s["project_name"],
        "trainer.experiment_name": run,
        "trainer.total_epochs": s["total_epochs"],
        "trainer.total_training_steps": s["total_training_steps"],
        "trainer.save_freq": s["save_freq"],
        "trainer.test_freq": s["test_freq"],
        "trainer.logger": s["logger"],
        "trainer.seed": cfg.get("seed", 0),
        "trainer.nnodes": nnodes,
        "trainer.n_gpus_per_node": n_gpus,
        "codegrpo.device": device,
        "codegrpo.run_dir": str(run_dir),
        "codegrpo.metrics_file": str(run_dir / "metrics.jsonl"),
        "codegrpo.chat_template": chat_template,
    }
    overrides = [f"{k}={fmt(v)}" for k, v in ov.items()] + list(s.get("overrides") or [])
    if device == "cpu":
        from codegrpo.verl import cpu

        overrides += cpu.sft_overrides(cpu.resolve_precision(cfg.get("cpu_precision", "auto")))
    prefix = [sys.executable, "-m", "torch.distributed.run"]
    if nnodes == 1:
        prefix += ["--standalone", "--nnodes=1"]
    else:
        # multi-node (inside one SLURM allocation): one torchrun per node via srun, rendezvous on this node.
        # The rule runs in the executor plugin's job step, which holds the CPUs (and, with --gres, no GPUs):
        # the torchrun step overlaps it and asks for each node's GPUs itself (codegrpo.cluster.step_srun), with
        # the enclosing step's SLURM_* geometry removed from its environment.
        import socket

        from codegrpo.cluster import step_srun, unset_prefix
        from codegrpo.cluster.resources import stage_resources

        cpus = stage_resources(cfg, "sft").get("cpus_per_task") if "cluster" in cfg else None
        endpoint = f"{os.environ.get('MASTER_ADDR') or socket.gethostname()}:{os.environ.get('MASTER_PORT', '29500')}"
        prefix = [
            *unset_prefix(),
            *step_srun(
                nodes=nnodes, ntasks=nnodes, ntasks_per_node=1, cpus_per_task=cpus, gpus_per_node=n_gpus, job_name=run
            ),
            *prefix,
            f"--nnodes={nnodes}",
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint={endpoint}",
        ]
    prefix += [f"--nproc_per_node={n_gpus}", "-m", "codegrpo.verl.sft_main"]
    return Launch("sft", run, "sft", overrides, prefix, _common_env(device))


def cpu_multinode_overrides(nnodes: int, n_gpus_per_node: int) -> list[str]:
    """CPU mode spread over ``nnodes`` Ray nodes (the one-host rehearsal, whose nodes announce the CPU-mode
    resources): the trainer's topology instead of CPU mode's single node and single worker."""
    return [f"trainer.nnodes={int(nnodes)}", f"trainer.n_gpus_per_node={int(n_gpus_per_node)}"]


def grpo_launch(
    cfg: dict,
    section: dict,
    run: str,
    *,
    train_files: Sequence[str] | str,
    val_files: Sequence[str] | str,
    model_path: str,
    run_dir: str | os.PathLike,
    extra_overrides: Sequence[str] = (),
    reward_path: str | os.PathLike | None = None,
) -> Launch:
    """The GRPO launch of run ``run`` from an RL section of the pipeline config (``skeleton_rl``, ``skin_rl`` or
    ``dhrcl.training``, schema ``$defs/rl_stage`` with its defaults filled in).
    """
    s = section
    device = cfg["device"]
    run_dir = Path(run_dir).resolve()
    n_gpus = 1 if device == "cpu" else s["n_gpus_per_node"]
    nnodes = 1 if device == "cpu" else s["nnodes"]
    reward = s["reward"]
    ar = "actor_rollout_ref"
    ov = {
        "data.train_files": _files(train_files),
        "data.val_files": _files(val_files),
        "data.train_batch_size": s["train_batch_size"],
        "data.max_prompt_length": s["max_prompt_length"],
        "data.max_response_length": s["max_response_length"],
        "data.filter_overlong_prompts": s["filter_overlong_prompts"],
        "data.truncation": "error",
        f"{ar}.model.path": model_path,
        f"{ar}.model.use_remove_padding": s["use_remove_padding"] and device != "cpu",
        f"{ar}.model.enable_gradient_checkpointing": s["gradient_checkpointing"],
        f"{ar}.actor.optim.lr": s["lr"],
        f"{ar}.actor.ppo_mini_batch_size": s["ppo_mini_batch_size"],
        f"{ar}.actor.ppo_micro_batch_size_per_gpu": s["ppo_micro_batch_size_per_gpu"],
        f"{ar}.actor.ppo_epochs": s["ppo_epochs"],
        f"{ar}.actor.use_kl_loss": s["kl_coef"] > 0,
        f"{ar}.actor.kl_loss_coef": s["kl_coef"],
        f"{ar}.actor.kl_loss_type": s["kl_loss_type"],
        f"{ar}.actor.entropy_coeff": s["entropy_coeff"],
        f"{ar}.actor.fsdp_config.param_offload": s["param_offload"],
        f"{ar}.actor.fsdp_config.optimizer_offload": s["optimizer_offload"],
        f"{ar}.ref.fsdp_config.param_offload": s["ref_param_offload"],
        f"{ar}.ref.log_prob_micro_batch_size_per_gpu": s["ref_log_prob_micro_batch_size_per_gpu"],
        f"{ar}.rollout.name": s["rollout_name"],
        f"{ar}.rollout.n": s["n"],
        f"{ar}.rollout.temperature": s["temperature"],
        f"{ar}.rollout.tensor_model_parallel_size": s["tensor_model_parallel_size"],
        f"{ar}.rollout.gpu_memory_utilization": s["gpu_memory_utilization"],
        f"{ar}.rollout.log_prob_micro_batch_size_per_gpu": s["rollout_log_prob_micro_batch_size_per_gpu"],
        "custom_reward_function.path": str(Path(reward_path or REWARD_ENTRY).resolve()),
        "custom_reward_function.name": reward["function"],
        "reward_model.reward_manager": reward["manager"],
        # the reward runs in the TaskRunner, pinned to the job's node where the run's services listen on 127.0.0.1
        # (codegrpo.verl.driver.task_runner_options); verl's async reward task could land on any node
        "reward_model.launch_reward_fn_async": False,
        "trainer.project_name": s["project_name"],
        "trainer.experiment_name": run,
        "trainer.logger": s["logger"],
        "trainer.nnodes": nnodes,
        "trainer.n_gpus_per_node": n_gpus,
        "trainer.total_epochs": s["total_epochs"],
        "trainer.total_training_steps": s["total_training_steps"],
        "trainer.save_freq": s["save_freq"],
        "trainer.test_freq": s["test_freq"],
        "trainer.val_before_train": s["val_before_train"],
        "trainer.default_local_dir": str(run_dir / "checkpoints"),
        "trainer.resume_mode": "auto",
        "trainer.max_actor_ckpt_to_keep": s["max_checkpoints_to_keep"],
        "trainer.max_critic_ckpt_to_keep": s["max_checkpoints_to_keep"],  # GRPO has no critic; kept in step
        "++data.seed": cfg.get("seed", 0),
        # vLLM's sampling seed (verl 0.4.1 reads rollout.get("seed", 0)): without it every seed's rollouts share
        # the sampler's seed 0 and the runs of a variant differ only in data order
        f"++{ar}.rollout.seed": cfg.get("seed", 0),
        "codegrpo.device": device,
        "codegrpo.run_dir": str(run_dir),
        "codegrpo.metrics_file": str(run_dir / "metrics.jsonl"),
    }
    overrides = [f"{k}={fmt(v)}" for k, v in ov.items()]
    if device == "cpu":
        from codegrpo.verl import cpu

        overrides += cpu.grpo_overrides(cpu.resolve_precision(cfg.get("cpu_precision", "auto")))
    overrides += list(extra_overrides) + list(s.get("overrides") or [])
    prefix = [sys.executable, "-m", "codegrpo.verl.driver"]
    return Launch("grpo", run, "grpo", overrides, prefix, _common_env(device))


def _files(files: Sequence[str] | str):
    if isinstance(files, (str, os.PathLike)):
        return str(Path(files).resolve())
    files = [str(Path(f).resolve()) for f in files]
    return files[0] if len(files) == 1 else files


def policy_loss_overrides(
    mode: str | None, token_weights: Mapping[str, Any] | None = None, *, sign_flipped: bool = False
) -> list[str]:
    """Overrides selecting policy loss ``mode`` (``vanilla`` or a DHRCL loss of :mod:`codegrpo.verl.losses`,
    with the ``token_weights`` settings ``tau``/``w_min``/``w_max``); ``sign_flipped`` selects the learning
    checks' deliberately broken control loss instead."""
    ar = "actor_rollout_ref.actor.policy_loss"
    lib = "actor_rollout_ref.model.external_lib=codegrpo.verl.losses"
    if sign_flipped:
        from codegrpo.verl.losses import SIGN_FLIPPED

        return [f"{ar}.loss_mode={SIGN_FLIPPED}", lib]
    ov = [f"{ar}.loss_mode={mode}"]
    if mode != "vanilla":
        tw = dict(token_weights or {})
        ov += [
            lib,
            f"+{ar}.dhrcl_tau={fmt(float(tw.get('tau', 1.0)))}",
            f"+{ar}.dhrcl_w_min={fmt(float(tw.get('w_min', 0.25)))}",
            f"+{ar}.dhrcl_w_max={fmt(float(tw.get('w_max', 4.0)))}",
        ]
    return ov

"""The project GRPO driver: ``python -m codegrpo.verl.driver <overrides>``.

It composes ``codegrpo/verl/config/grpo.yaml`` (verl's ``ppo_trainer.yaml`` + the ``codegrpo`` section), starts or
joins Ray (CPU mode: fake GPUs and the CPU patches as the worker setup hook) and runs verl's TaskRunner role, as
verl 0.4.1's ``main_ppo.run_ppo`` does: one Ray actor with one CPU (:class:`TaskRunner`) in which
:class:`codegrpo.verl.trainer.ProjectTaskRunner` builds the trainer and trains.

The driver itself never imports verl: the composition finds verl's configs by path
(:func:`codegrpo.verl.launch.compose`), and the actor class is defined here and imports the trainer in its own
process. verl's import (torch, tensordict, transformers: a few CPU-seconds) is paid by the processes that use it,
the TaskRunner and the workers, and not once more by the driver on every run's critical path.
"""

from __future__ import annotations

import os
import sys

import ray

WORKERS_FILE = "workers.json"
#: the thread-count variables Snakemake gives a job (its rule's ``threads``), forwarded to verl's Ray workers
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


@ray.remote(num_cpus=1)
class TaskRunner:
    """verl's TaskRunner actor (one CPU, as ``main_ppo.TaskRunner``); its process runs
    :class:`codegrpo.verl.trainer.ProjectTaskRunner`."""

    def run(self, config):
        from codegrpo.verl.trainer import ProjectTaskRunner

        return ProjectTaskRunner().run(config)


def ray_init_kwargs(cfg) -> dict:
    """How the driver starts (or joins) Ray for this config.

    The workers' ``runtime_env`` carries, of the project's variables, only ``$CODEGRPO_RUN_SETTINGS`` (the reward
    reads its settings from that file), plus API keys of an embedding service and Hugging Face's offline switches
    (:func:`codegrpo.rewards.forward_env`), and the job's thread counts (:data:`THREAD_VARS`)."""
    from codegrpo import runsettings
    from codegrpo.rewards import forward_env

    # the job's threads (Snakemake sets them from the rule's threads): also when the driver joins a Ray started
    # elsewhere, whose workers would otherwise inherit that Ray's environment
    forwarded = ("TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONPATH", *THREAD_VARS)
    env_vars = {k: v for k, v in os.environ.items() if k in forwarded}
    # the one settings channel: the run's settings.json; of the project's variables only its path is forwarded
    path = runsettings.settings_path()
    key_env = ()
    if path:
        env_vars[runsettings.SETTINGS_ENV] = path
        key_env = tuple(filter(None, [(runsettings.load(path).get("embedding") or {}).get("api_key_env")]))
    env_vars.update(forward_env(names=key_env))  # API keys of the embedding service, offline switches
    env_vars.setdefault("TOKENIZERS_PARALLELISM", "false")
    if cfg.codegrpo.device == "cpu":
        from codegrpo.verl import cpu

        n = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
        # RAY_ADDRESS: the multi-node rehearsal's cluster, whose nodes announce the CPU-mode resources
        address, precision = os.environ.get("RAY_ADDRESS"), cfg.codegrpo.get("cpu_precision", "bf16")
        return cpu.ray_init_kwargs(n, cfg.codegrpo.get("ray_num_cpus"), env_vars, address, precision)
    kwargs = {"runtime_env": {"env_vars": {"NCCL_DEBUG": "WARN", "VLLM_LOGGING_LEVEL": "WARN", **env_vars}}}
    if os.environ.get("RAY_ADDRESS"):  # multi-node: join the cluster the job script started
        kwargs["address"] = os.environ["RAY_ADDRESS"]
    elif cfg.codegrpo.get("ray_num_cpus") or cfg.ray_init.get("num_cpus"):
        kwargs["num_cpus"] = cfg.codegrpo.get("ray_num_cpus") or cfg.ray_init.num_cpus
    return kwargs


def task_runner_options(node_id: str) -> dict:
    """Ray options of the TaskRunner: pinned (hard affinity) to the driver's node ``node_id``. The reward runs in
    the TaskRunner and reaches the run's services (the embedding server) at 127.0.0.1 of the job's node, where
    the driver runs; Ray would otherwise place the TaskRunner on any node of a multi-node cluster."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)}


def main(argv: list[str] | None = None) -> None:
    from codegrpo.verl.launch import compose

    cfg = compose("grpo", sys.argv[1:] if argv is None else argv)
    started = False
    if not ray.is_initialized():
        ray.init(**ray_init_kwargs(cfg))
        started = True
    try:
        runner = TaskRunner.options(**task_runner_options(ray.get_runtime_context().get_node_id()))
        ray.get(runner.remote().run.remote(cfg))
    finally:
        if started:
            ray.shutdown()


if __name__ == "__main__":
    main()

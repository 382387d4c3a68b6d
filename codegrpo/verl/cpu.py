"""CPU mode for verl 0.4.1 (``device: cpu``): what it takes to run the real SFT and GRPO loops without a GPU.

verl 0.4.1 assumes CUDA in a few places. CPU mode works around each one at runtime, without touching verl's
files, and ONLY when the pipeline runs with ``device: cpu`` (the GPU path never imports this module):

1. Ray: the driver starts a local Ray with a fake GPU count (``num_gpus=n``) and a custom ``"cpu"`` resource of
   the same size, because verl's resource pool asks for GPUs and, with ``trainer.device=cpu``, names its
   placement-group bundles ``"cpu"`` (:func:`ray_init_kwargs`). Across several Ray nodes (the one-host SLURM
   rehearsal) every node announces those resources itself (:func:`node_resources`) and the driver joins.
2. ``verl.utils.device.get_nccl_backend`` raises on CPU: it returns ``"gloo"``, and the ``"cpu:gloo,cpu:gloo"``
   backend string verl then builds is rewritten to ``"gloo"`` in ``torch.distributed.init_process_group``.
3. ``torch.cpu`` lacks the ``torch.cuda`` memory/RNG helpers verl calls: harmless stubs are added.
4. verl hard-codes ``attn_implementation="flash_attention_2"``: CPU mode asks transformers for ``sdpa``.
5. ``BaseShardingManager`` (used by the HF rollout) lacks the ``timing`` attribute the worker reads.
   FSDP2 offloads the reference model with a pinned-memory policy, which needs an accelerator: CPU mode
   builds that policy without pinning.
6. The HF rollout hands the prompt's ``position_ids`` to ``generate``, which then gives every response token the
   last prompt position (transformers 4.53): CPU mode lets ``generate`` derive and advance the positions.
7. Config: FSDP2 (FSDP1 wants parameters on GPU), the HF rollout (no vLLM on CPU), tensor parallel 1, no
   remove-padding (flash-attn kernels) (:func:`grpo_overrides`, :func:`sft_overrides`). The actor keeps its
   gathered weights after a forward (FSDP2 ``reshard_after_forward=false``): the HF rollout calls the model once
   per generated token, and with verl's default every call gathered and cast every layer again (on CPU, with the
   packaged 135M model, 21 of the worker's 48 CPU-seconds of a one-step run). The weights are resharded after
   the backward pass as before, so the update and the next rollout see the same values: the numbers do not
   change (tests/verl/test_cpu.py checks tokens, log-probs and weights bit for bit).
8. Precision (config key ``cpu_precision``, :func:`resolve_precision`): verl computes in bfloat16 (FSDP2's
   ``MixedPrecisionPolicy(param_dtype=bf16)`` and ``torch.autocast(dtype=bf16)`` around the actor's forward, the
   HF rollout and the SFT step). A CPU without bfloat16 instructions (no AVX512-BF16 or AMX: AVX2-only x86, most
   laptops) emulates them, about 9 times slower than float32 for the same matrix product. With ``fp32`` the
   workers keep float32: the policy's ``param_dtype`` and the reference model's dtype are float32 and CPU
   autocast to a 16-bit type is off. ``auto`` (default) picks ``bf16`` where the CPU has the instructions (the
   numbers of the GPU recipe's precision) and ``fp32`` elsewhere. The launch resolves it into the Hydra key
   ``codegrpo.cpu_precision``; the driver names the matching setup hook for its Ray workers
   (:func:`setup_fp32` or :func:`setup`), and the SFT entry point passes it to :func:`setup`.

:func:`setup` applies 2–6 and 8 in the current process; it is the Ray ``worker_process_setup_hook`` of every worker
(:data:`WORKER_SETUP_HOOK`) and is called first by the SFT entry point in each torchrun process.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

WORKER_SETUP_HOOK = "codegrpo.verl.cpu.setup"
ENV_FLAG = "CODEGRPO_VERL_CPU_PATCHED"
#: the setup hook of workers that compute in float32 (item 8)
WORKER_SETUP_HOOK_FP32 = "codegrpo.verl.cpu.setup_fp32"
PRECISIONS = ("auto", "bf16", "fp32")

_applied = False


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 with its own instructions (AVX512-BF16 or AMX), as torch reports it."""
    import torch

    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def resolve_precision(setting: str = "auto") -> str:
    """``bf16`` or ``fp32`` for the config's ``cpu_precision`` (``auto``: bf16 only on a CPU with
    :func:`native_bf16`)."""
    if setting not in PRECISIONS:
        raise ValueError(f"cpu_precision must be one of {', '.join(PRECISIONS)}, got {setting!r}")
    if setting == "auto":
        return "bf16" if native_bf16() else "fp32"
    return setting


def grpo_overrides(precision: str = "bf16") -> list[str]:
    """verl overrides CPU mode needs for main_ppo (appended after the stage's own overrides); ``precision`` (bf16 or
    fp32, resolved) goes to ``codegrpo.cpu_precision``, and with fp32 the reference model is loaded in float32 too
    (verl's default for it is bfloat16)."""
    fp32 = ["++actor_rollout_ref.ref.fsdp_config.model_dtype=fp32"] if precision == "fp32" else []
    return [
        f"codegrpo.cpu_precision={precision}",
        *fp32,
        "trainer.device=cpu",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.model.use_remove_padding=false",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
        "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false",
        "actor_rollout_ref.ref.fsdp_config.param_offload=false",
    ]


def sft_overrides(precision: str = "bf16") -> list[str]:
    """verl overrides CPU mode needs for fsdp_sft_trainer; ``precision`` as in :func:`grpo_overrides`."""
    return [
        f"codegrpo.cpu_precision={precision}",
        "model.strategy=fsdp2",
        "use_remove_padding=false",
        "model.fsdp_config.cpu_offload=false",
        "model.fsdp_config.offload_params=false",
    ]


def node_resources(n_gpus: int, num_cpus: int | None = None) -> dict:
    """What a Ray node must announce for CPU mode to place ``n_gpus`` training workers on it: that many fake
    GPUs (verl's resource check counts them), the ``"cpu"`` resource of the same size (verl's placement-group
    bundles ask for it with ``trainer.device=cpu``) and logical CPUs for the workers and the driver's task
    runner (Ray does not enforce them)."""
    return {"num_cpus": num_cpus or max(8, 2 * n_gpus + 2), "num_gpus": n_gpus, "resources": {"cpu": n_gpus}}


def _runtime_env(env_vars: dict | None, precision: str) -> dict:
    return {
        "env_vars": {"TOKENIZERS_PARALLELISM": "false", **(env_vars or {})},
        "worker_process_setup_hook": WORKER_SETUP_HOOK_FP32 if precision == "fp32" else WORKER_SETUP_HOOK,
    }


def ray_init_kwargs(
    n_gpus: int,
    num_cpus: int | None = None,
    env_vars: dict | None = None,
    address: str | None = None,
    precision: str = "bf16",
) -> dict:
    """``ray.init`` arguments for CPU mode: a local Ray with :func:`node_resources` for ``n_gpus`` workers, or
    with ``address`` the cluster there (its nodes announce :func:`node_resources` themselves: a driver joining
    a cluster cannot); the CPU patches as the workers' setup hook either way. The local Ray starts without its
    dashboard (nothing here reads it; on 2 cores its head process and modules cost about 5 s of CPU per run)."""
    if address:
        return {"address": address, "runtime_env": _runtime_env(env_vars, precision)}
    runtime_env = _runtime_env(env_vars, precision)
    return {**node_resources(n_gpus, num_cpus), "include_dashboard": False, "runtime_env": runtime_env}


LOCAL_RAY_PORTS = 1400  # GCS, the node's own ports (base+1..+7), worker ports (base+1000..+1399)


def local_ray_command(
    ray_bin: str, temp_dir: str | os.PathLike, port: int, n_gpus: int, num_cpus: int | None = None
) -> list[str]:
    """``ray start --head --block`` of a one-node local Ray announcing :func:`node_resources` for ``n_gpus``
    training workers, on 127.0.0.1, every port fixed from ``port`` (two such Rays on one host do not collide),
    no dashboard, session files under ``temp_dir``."""
    res = node_resources(n_gpus, num_cpus)
    return [
        ray_bin,
        "start",
        "--head",
        "--block",
        "--disable-usage-stats",
        "--include-dashboard=false",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={res['num_cpus']}",
        f"--num-gpus={res['num_gpus']}",
        f"--resources={json.dumps(res['resources'], sort_keys=True)}",
        f"--node-manager-port={port + 1}",
        f"--object-manager-port={port + 2}",
        f"--dashboard-agent-listen-port={port + 3}",
        f"--dashboard-agent-grpc-port={port + 4}",
        f"--metrics-export-port={port + 5}",
        f"--runtime-env-agent-port={port + 6}",
        f"--ray-client-server-port={port + 7}",
        f"--min-worker-port={port + 1000}",
        f"--max-worker-port={port + LOCAL_RAY_PORTS - 1}",
        f"--temp-dir={temp_dir}",
    ]


@contextlib.contextmanager
def local_ray(
    n_gpus: int = 1,
    num_cpus: int | None = None,
    *,
    temp_base: str | os.PathLike = "/tmp",
    timeout_s: float = 120.0,
    python: str = sys.executable,
    export: bool = True,
):
    """A local CPU-mode Ray that several training runs join, one after another, instead of each starting its own
    (the start-up is paid once). While the block runs, ``RAY_ADDRESS`` (and the cluster's token,
    ``RAY_AUTH_MODE`` / ``RAY_AUTH_TOKEN``) are exported, so the trainer (:func:`ray_init_kwargs` with
    ``address``) and every process started from here join it; on exit every Ray process it started is stopped
    and the variables are restored. Yields the environment it exported.

    What a run computes does not change: the node announces the resources a run's own local Ray would have
    (:func:`node_resources`), each run is its own Ray job (its own workers, runtime env and setup hook), and a
    run's non-detached actors end with its driver. Runs that overlap in time wait for the node's ``n_gpus``
    fake GPUs. ``export=False`` leaves ``os.environ`` alone (the caller hands the yielded variables to the runs that
    should join)."""
    from codegrpo.cluster import ClusterError, leftover_pids, probe, random_port_base
    from codegrpo.procgroup import popen_group, stop_group

    temp_dir = Path(tempfile.mkdtemp(prefix="cgray-", dir=temp_base))  # short: Ray puts Unix sockets in it
    temp_dir.chmod(0o700)
    port = random_port_base(LOCAL_RAY_PORTS)
    address = f"127.0.0.1:{port}"
    ray_bin = str(Path(python).with_name("ray"))
    exported = {"RAY_ADDRESS": address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {**os.environ, **exported, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    env.pop("RAY_ADDRESS")  # the head itself
    saved = {k: os.environ.get(k) for k in exported}
    log_path = temp_dir / "ray-start.log"
    with open(log_path, "ab") as out:
        proc = popen_group(
            local_ray_command(ray_bin, temp_dir / "s", port, n_gpus, num_cpus),
            stdout=out,
            stderr=out,
            env=env,
            umask=0o077,
        )
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise ClusterError(
                    f"local Ray exited with code {proc.returncode}: {log_path.read_text(errors='replace')[-2000:]}"
                )
            try:
                state = probe(address, timeout_s=60, python=python, token=exported["RAY_AUTH_TOKEN"])
                if state["nodes"] >= 1 and state["GPU"] >= n_gpus:
                    break
            except ClusterError as exc:
                if time.monotonic() - t0 > timeout_s:
                    raise ClusterError(f"local Ray at {address} not ready within {timeout_s:.0f}s: {exc}") from exc
            time.sleep(0.5)
        if export:
            os.environ.update(exported)
        yield dict(exported)
    finally:
        stop_group(proc, grace_s=30)
        for pid in leftover_pids(temp_dir):  # Ray processes that outlived `ray start` (they name our temp dir)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        import shutil

        shutil.rmtree(temp_dir, ignore_errors=True)


class PipelineRay:
    """One local CPU-mode Ray for every verl training job of a Snakemake run (``pipeline_ray: true``).

    The Snakefile starts it in ``onstart`` (:meth:`start`, once the plan is known) and stops it in ``onsuccess`` /
    ``onerror`` (:meth:`stop`; also at interpreter exit). While it runs, ``RAY_ADDRESS`` and its token are in the
    Snakemake process's environment, which local jobs inherit: each training job joins it (:func:`ray_init_kwargs`
    with ``address``) instead of paying a Ray start of its own. It starts only for device ``cpu`` under the local
    executor, when the plan holds training jobs and no ``RAY_ADDRESS`` is set already; it announces one fake GPU per
    training job that can run at once (the plan's training jobs, at most the run's cores): what each run's own Ray
    would have announced for it (:func:`node_resources`), so what a job computes does not change."""

    def __init__(self):
        self._stack = contextlib.ExitStack()
        self.env: dict[str, str] | None = None

    @staticmethod
    def slots(*, enabled: bool, device: str, executor: str | None, n_training_jobs: int, cores: int | None) -> int:
        """Fake GPUs the pipeline's Ray announces; 0: no pipeline Ray (each job starts its own, or joins the
        ``RAY_ADDRESS`` already set)."""
        if not enabled or device != "cpu" or executor != "local" or n_training_jobs <= 0:
            return 0
        if os.environ.get("RAY_ADDRESS"):
            return 0
        return max(1, min(n_training_jobs, int(cores or 1)))

    def start(self, **plan) -> dict | None:
        n = self.slots(**plan)
        if n == 0 or self.env is not None:
            return None
        import atexit
        import logging

        self.env = self._stack.enter_context(local_ray(n, export=True))
        atexit.register(self.stop)
        logging.getLogger(__name__).warning(
            "pipeline Ray at %s (%d training slot%s) for this run's training jobs",
            self.env["RAY_ADDRESS"],
            n,
            "" if n == 1 else "s",
        )
        return self.env

    def stop(self) -> None:
        self._stack.close()
        self.env = None


def is_applied() -> bool:
    return _applied


def setup_fp32() -> None:
    """:func:`setup` with ``precision="fp32"``: the Ray setup hook of float32 runs (:data:`WORKER_SETUP_HOOK_FP32`)."""
    setup("fp32")


def setup(precision: str = "bf16") -> None:
    """Apply the CPU runtime patches in this process (idempotent); ``precision`` (``bf16`` or ``fp32``, resolved by
    the launch from ``cpu_precision``) selects item 8 of the module doc."""
    if not _applied:
        _patch_verl()
    if precision == "fp32":  # after the patches above: it imports verl modules that bind names they patch
        _compute_in_fp32()


def _patch_verl() -> None:
    """Items 2–6 of the module doc."""
    global _applied
    import torch
    import torch.distributed as dist
    import transformers

    import verl.utils.device as vdev
    from verl.workers.sharding_manager.base import BaseShardingManager

    vdev.get_nccl_backend = lambda: "gloo"

    orig_init = dist.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        if isinstance(backend, str) and backend.replace("cpu:gloo", "").replace("gloo", "").strip(",") == "":
            backend = "gloo"
        return orig_init(backend, *args, **kwargs)

    init_process_group.__wrapped__ = orig_init
    dist.init_process_group = init_process_group

    stubs = {
        "empty_cache": lambda *a, **k: None,
        "synchronize": lambda *a, **k: None,
        "get_device_name": lambda *a, **k: "cpu",
        "get_rng_state": lambda *a, **k: torch.get_rng_state(),
        "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
        "manual_seed": lambda seed, *a, **k: torch.manual_seed(seed),
        "max_memory_allocated": lambda *a, **k: 0,
        "max_memory_reserved": lambda *a, **k: 0,
        "memory_allocated": lambda *a, **k: 0,
        "memory_reserved": lambda *a, **k: 0,
        "reset_peak_memory_stats": lambda *a, **k: None,
        "mem_get_info": lambda *a, **k: (8 << 30, 16 << 30),
    }
    for name, fn in stubs.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, fn)

    def _sdpa(orig):
        def from_pretrained(cls, *args, **kwargs):
            if kwargs.get("attn_implementation") == "flash_attention_2":
                kwargs["attn_implementation"] = "sdpa"
            return orig(cls, *args, **kwargs)

        return classmethod(from_pretrained)

    for auto_cls in (
        transformers.AutoConfig,
        transformers.AutoModelForCausalLM,
        transformers.AutoModelForTokenClassification,
    ):
        auto_cls.from_pretrained = _sdpa(auto_cls.from_pretrained.__func__)

    if not hasattr(BaseShardingManager, "timing"):
        BaseShardingManager.timing = {}

    # FSDP2 always offloads the reference model with CPUOffloadPolicy(pin_memory=True); pinning needs an
    # accelerator, and on CPU the parameters already live in host memory
    import verl.workers.fsdp_workers as fsdp_workers

    policy_cls = fsdp_workers.CPUOffloadPolicy
    if policy_cls is not None and not getattr(policy_cls, "_codegrpo_cpu", False):

        def cpu_offload_policy(*args, pin_memory=True, **kwargs):
            return policy_cls(*args, pin_memory=False, **kwargs)

        cpu_offload_policy._codegrpo_cpu = True
        fsdp_workers.CPUOffloadPolicy = cpu_offload_policy

    # The HF rollout passes the prompt's position_ids to `generate`; transformers >= 4.4x then slices the LAST
    # prompt position for every new token (it only derives positions itself when none are given), so every
    # response token of a CPU rollout sat at one position: coherent text could not be sampled. Positions are
    # left to `generate`, which derives the same prompt positions from the left-padded attention mask and
    # advances them per token.
    from verl.workers.rollout.hf_rollout import HFRollout

    if not getattr(HFRollout, "_codegrpo_cpu", False):
        rollout_init = HFRollout.__init__

        def hf_rollout_init(self, module, config):
            rollout_init(self, module, config)
            generate = module.generate

            def generate_without_prompt_positions(*args, position_ids=None, **kwargs):
                return generate(*args, **kwargs)

            module.generate = generate_without_prompt_positions

        HFRollout.__init__ = hf_rollout_init
        HFRollout._codegrpo_cpu = True

    os.environ[ENV_FLAG] = "1"
    _applied = True


def _compute_in_fp32() -> None:
    """Item 8 of the module doc: FSDP2's mixed-precision policy keeps float32 parameters for compute, and CPU
    autocast to a 16-bit type is off (verl's actor, rollout and SFT step enter it around every forward)."""
    import torch
    import verl.utils.fsdp_utils as fsdp_utils
    import verl.workers.fsdp_workers as fsdp_workers

    policy_cls = fsdp_utils.MixedPrecisionPolicy
    if not getattr(policy_cls, "_codegrpo_fp32", False):

        def fp32_policy(*args, param_dtype=None, **kwargs):
            return policy_cls(*args, param_dtype=torch.float32, **kwargs)

        fp32_policy._codegrpo_fp32 = True
        for module in (fsdp_utils, fsdp_workers, sys.modules.get("verl.trainer.fsdp_sft_trainer")):
            if module is not None and getattr(module, "MixedPrecisionPolicy", None) is policy_cls:
                module.MixedPrecisionPolicy = fp32_policy

    if not getattr(torch.autocast, "_codegrpo_fp32", False):

        class autocast(torch.autocast):
            _codegrpo_fp32 = True

            def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
                if device_type == "cpu" and dtype in (torch.bfloat16, torch.float16):
                    enabled = False
                super().__init__(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

        torch.autocast = autocast

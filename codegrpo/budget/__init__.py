"""Plan-time budget of every training job: step arithmetic, checkpoints on disk, GPU memory per GPU, GPU-hours.

``build_budget(cfg)`` computes, from the config and the training data's row counts (the Parquet files when the
data stage has run, else ``budget.expected_rows``), one entry per training job of the plan (SFT, skeleton/skin
RL, every ``dhrcl-<variant>-seed<seed>``) and the totals; ``budget_problems`` lists what cannot run (memory over
the GPU, disk over ``cluster.scratch_quota``, steps the data cannot supply), each naming the number and the
config key to change. ``write_budget`` writes ``results/budget.{md,json}`` (rule ``budget``);
:mod:`codegrpo.preflight` refuses a plan with problems. ``python -m codegrpo.budget --config config/paper.yaml
--md docs/budget-paper.md`` regenerates the checked-in paper table.

Step arithmetic (verl 0.4.1, read from its source):

* RL (``RayPPOTrainer._create_dataloader``): one batch of ``data.train_batch_size`` prompts per step, the train
  loader has ``drop_last=True`` → ``batches_per_epoch = rows // train_batch_size``. ``fit`` loops
  ``for epoch in range(total_epochs)`` and stops at ``total_training_steps`` only if the loader supplies that many
  batches: the final save and validation happen at ``is_last_step``. The project therefore gives verl
  ``total_epochs = max(configured, ceil(total_training_steps / batches_per_epoch))`` (:func:`epochs_for_steps`),
  at launch from the Parquet rows and again in the trainer from the real loader length (after verl's
  ``filter_overlong_prompts``).
* SFT (``FSDPSFTTrainer``): a ``DistributedSampler(drop_last=True)`` over W = nnodes x GPUs, per-rank batch
  ``train_batch_size / W`` with ``drop_last=True`` → ``batches_per_epoch = (rows // W) // (train_batch_size // W)``.

Memory model (per GPU; constants in :class:`MemoryModel`, one place to calibrate against a measurement):

* model state under FSDP full sharding: ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward
  Training Trillion Parameter Models", §3.1 and Fig. 1): mixed-precision Adam holds 2Ψ + 2Ψ + KΨ bytes with
  K = 12, i.e. **16 bytes per parameter**, and stage 3 (P_os+g+p) divides all of it by the data-parallel degree
  N_d. verl's FSDP actor keeps fp32 parameters, fp32 gradients and fp32 Adam moments (4 + 4 + 8 = 16 bytes per
  parameter as well), sharded over the world size;
* activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Eq. (1):
  per transformer layer ``s b h (34 + 5 a s / h)`` bytes (16-bit activations, no tensor parallelism). verl runs
  flash attention, which stores no ``a s^2`` score matrix, so the second term is dropped: **34 s b h** per layer.
  With full activation recomputation (gradient checkpointing) §4 of the same paper keeps only the layer input,
  **2 s b h** per layer, plus one layer's full activations while it is recomputed. ``s b`` is the micro-batch's
  token count at the configured lengths (prompt + response, every sequence at full length: an upper bound);
* the logits of one micro-batch (``s b V``, bf16 output plus the fp32 copy the log-prob needs: 6 bytes per
  element, this project's assumption);
* the rollout engine (vLLM >= 0.7 as verl 0.4.1 drives it): ``gpu_memory_utilization`` x the GPU's memory
  (its weights and KV cache), while the actor's FSDP state stays resident; the KV cache's capacity in tokens is
  reported next to the rollout batch's tokens per engine;
* a fixed overhead (CUDA context, NCCL buffers, allocator fragmentation).

Checkpoints (verl 0.4.1): an RL actor checkpoint holds the fp32 model shards and the Adam moments (12 bytes per
parameter, ``save_contents: [model, optimizer, extra]``); verl removes the oldest *before* writing a new one, so
at most ``max_checkpoints_to_keep`` are on disk. The SFT trainer saves the fp32 model (4 bytes per parameter)
and never deletes one. The exported Hugging Face model adds 2 bytes per parameter (bf16) per run.

GPU-hours (:class:`ThroughputModel`, documented assumptions): FLOPs per token 2Ψ for a forward pass and 6Ψ for
forward + backward (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1); an RL step generates
``train_batch_size x n`` sequences (rollout at ``rollout_mfu``), recomputes old and reference log-probs (two
forward passes) and trains ``ppo_epochs`` times (at ``train_mfu``), every sequence at full length (an upper
bound). Validation and evaluation are not counted.

The package's modules, one job each: :mod:`~codegrpo.budget.models` (the constants and model architectures),
:mod:`~codegrpo.budget.steps` (step arithmetic), :mod:`~codegrpo.budget.memory` (the memory model),
:mod:`~codegrpo.budget.plan` (the jobs, the budget and its problems), :mod:`~codegrpo.budget.report` (Markdown,
files, command line).
"""

from __future__ import annotations

from codegrpo.budget.memory import activation_bytes, eval_memory, rl_memory, sft_memory, state_bytes
from codegrpo.budget.models import (
    GB,
    GPUS,
    KNOWN_MODELS,
    MEMORY,
    RM_DTYPE_BYTES,
    THROUGHPUT,
    MemoryModel,
    ModelSpec,
    ThroughputModel,
    gpu_memory_gb,
    gpu_peak_tflops,
    model_spec,
    reward_model_memory,
    server_memory_fraction,
    spec_from_hf_config,
)
from codegrpo.budget.plan import (
    DECOMPILE_TASKS,
    EVAL_PROBLEMS,
    TRAIN_FILES,
    budget_problems,
    build_budget,
    codegen_tokens,
    curriculum_plan,
    eval_gpu_hours,
    plan_eval_jobs,
    plan_jobs,
    plan_rows,
)
from codegrpo.budget.report import budget_markdown, main, write_budget
from codegrpo.budget.steps import epochs_for_steps, rl_batches_per_epoch, saves, sft_batches_per_epoch, step_plan

__all__ = [
    "DECOMPILE_TASKS",
    "EVAL_PROBLEMS",
    "GB",
    "GPUS",
    "KNOWN_MODELS",
    "MEMORY",
    "RM_DTYPE_BYTES",
    "THROUGHPUT",
    "TRAIN_FILES",
    "MemoryModel",
    "ModelSpec",
    "ThroughputModel",
    "activation_bytes",
    "budget_markdown",
    "budget_problems",
    "build_budget",
    "codegen_tokens",
    "curriculum_plan",
    "epochs_for_steps",
    "eval_gpu_hours",
    "eval_memory",
    "gpu_memory_gb",
    "gpu_peak_tflops",
    "main",
    "model_spec",
    "plan_eval_jobs",
    "plan_jobs",
    "plan_rows",
    "reward_model_memory",
    "rl_batches_per_epoch",
    "rl_memory",
    "saves",
    "server_memory_fraction",
    "sft_batches_per_epoch",
    "sft_memory",
    "spec_from_hf_config",
    "state_bytes",
    "step_plan",
    "write_budget",
]

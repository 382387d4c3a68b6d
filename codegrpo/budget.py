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
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codegrpo.contracts import RL_STAGES

GB = 1e9


# ------------------------------------------------------------------------------------------------------------
# constants (the calibration points)


@dataclasses.dataclass(frozen=True)
class MemoryModel:
    """Every constant of the memory model. A measured figure (e.g. the activation peak of one micro-batch on a
    real GPU) calibrates it by replacing a value here, e.g. ``dataclasses.replace(MEMORY, act_sbh_per_layer=40)``."""

    # ZeRO §3.1: fp16 params (2) + fp16 grads (2) + fp32 params, momentum, variance (K = 12) = 16 bytes/param;
    # verl's FSDP actor: fp32 params (4) + fp32 grads (4) + Adam m, v (8) = 16 bytes/param, sharded over the world
    state_bytes_per_param: float = 16.0
    param_bytes: float = 4.0            # of the 16: the fp32 parameters (param_offload moves them to CPU)
    optimizer_bytes: float = 8.0        # of the 16: the Adam moments (optimizer_offload moves them to CPU)
    ref_bytes_per_param: float = 2.0    # the bf16 reference model, sharded (0 on the GPU with ref_param_offload)
    # Korthikanti et al. 2022 Eq. (1) without the attention-score term (flash attention) gives 34 s b h bytes/layer
    # for a GPT layer (4h MLP, full attention). The paper's LLaMA / Qwen3 layers (SwiGLU MLP, GQA, RMSNorm) store
    # more: measured on one H200 (benchmarks/gpu_memory_probe.py, docs/measurements/gpu_memory_probe_h200.json,
    # transformers' SDPA path, bf16): 45.5 s b h for the 6.7B LLaMA shape, 52.6 s b h for Qwen3-8B. The larger,
    # measured figure is used (an upper bound: flash-attn with verl's padding removal stores less).
    act_sbh_per_layer: float = 53.0
    # ... §4, full recomputation: the layer input only, 2 s b h bytes/layer (measured: exactly 2.0 on both shapes)
    act_sbh_per_layer_recompute: float = 2.0
    # bf16 logits + fp32 log-softmax for the log-probs; measured 5.0 (vocab 32256) and 4.2 (vocab 151936) bytes
    # per logit on the H200 probe; 6.0 keeps a margin
    logits_bytes_per_element: float = 6.0
    kv_bytes_per_element: float = 2.0       # bf16 KV cache
    rollout_weight_bytes_per_param: float = 2.0  # bf16 weights in the rollout engine
    overhead_gb: float = 3.0                # CUDA context, NCCL, fragmentation (assumption)
    rl_checkpoint_bytes_per_param: float = 12.0  # fp32 model shards (4) + Adam moments (8)
    sft_checkpoint_bytes_per_param: float = 4.0  # fp32 model (verl 0.4.1 SFT save_pretrained)
    export_bytes_per_param: float = 2.0          # the run's exported bf16 Hugging Face model


@dataclasses.dataclass(frozen=True)
class ThroughputModel:
    """The per-token throughput behind the GPU-hours (assumptions to calibrate with a measured step time)."""

    # model FLOPs utilisation (6 N FLOPs per token) of FSDP training / log-prob passes; measured on one H200 with
    # gradient checkpointing, no FSDP communication: 0.37 (6.7B LLaMA shape) and 0.38 (Qwen3-8B) of 989 TFLOP/s
    # (docs/measurements/gpu_memory_probe_h200.json); sharding adds communication, so 0.35
    train_mfu: float = 0.35
    rollout_mfu: float = 0.10  # of generation (memory-bandwidth bound decoding)
    default_peak_tflops: float = 989.0  # bf16 dense, H100 SXM (the default when the GPU model is unknown)


MEMORY = MemoryModel()
THROUGHPUT = ThroughputModel()

# GPU memory (GB) and bf16 dense peak TFLOP/s by model name (vendor data sheets); cluster.gpu_memory_gb overrides
GPUS: dict[str, tuple[float, float]] = {
    "a100-40gb": (40.0, 312.0), "a100": (80.0, 312.0), "a100-80gb": (80.0, 312.0), "h100": (80.0, 989.0),
    "h200": (141.0, 989.0), "h800": (80.0, 989.0), "l40s": (48.0, 362.0), "a6000": (48.0, 155.0),
    "a40": (48.0, 150.0), "v100": (32.0, 125.0), "b200": (180.0, 2250.0),
}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the memory model needs of a decoder-only transformer (LLaMA/Qwen layout: GQA, SwiGLU MLP)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm of q and k per head (head_dim weights each)

    @property
    def params(self) -> int:
        """Parameter count from the architecture (embeddings, attention, SwiGLU MLP, norms)."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        per_layer = self.hidden * q + 2 * self.hidden * kv + q * self.hidden + 3 * self.hidden * self.ffn
        per_layer += 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)
        emb = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * per_layer + emb + self.hidden

    @property
    def layer_params(self) -> int:
        return (self.params - self.vocab * self.hidden * (1 if self.tied else 2)) // max(1, self.layers)

    def kv_bytes_per_token(self, mem: MemoryModel = MEMORY) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * mem.kv_bytes_per_element


# the models the configs name, from their config.json on the Hugging Face Hub (parameter counts computed from
# these agree with the model cards: deepseek-coder-6.7b 6.7B, Qwen3 4.0B / 8.2B / 14.8B, Qwen3-Embedding 0.6B)
KNOWN_MODELS: dict[str, ModelSpec] = {
    # LLM4Decompile 6.7B v2 is deepseek-coder-6.7b-base fine-tuned (LLaMA layout, MHA)
    "LLM4Binary/llm4decompile-6.7b-v2": ModelSpec("llm4decompile-6.7b-v2", 32, 4096, 32, 32, 128, 11008, 32256),
    "Qwen/Qwen3-4B": ModelSpec("Qwen3-4B", 36, 2560, 32, 8, 128, 9728, 151936, tied=True, qk_norm=True),
    "Qwen/Qwen3-8B": ModelSpec("Qwen3-8B", 36, 4096, 32, 8, 128, 12288, 151936, qk_norm=True),
    "Qwen/Qwen3-14B": ModelSpec("Qwen3-14B", 40, 5120, 40, 8, 128, 17408, 151936, qk_norm=True),
    # AceCodeRM-7B: Qwen2.5-Coder-7B-Instruct (its config.json) plus a value head (3,585 parameters, not counted)
    "TIGER-Lab/AceCodeRM-7B": ModelSpec("AceCodeRM-7B", 28, 3584, 28, 4, 128, 18944, 152064),
    "Qwen/Qwen3-Embedding-0.6B": ModelSpec("Qwen3-Embedding-0.6B", 28, 1024, 16, 8, 128, 3072, 151669, tied=True,
                                           qk_norm=True),
}


def spec_from_hf_config(name: str, data: Mapping) -> ModelSpec:
    heads = int(data["num_attention_heads"])
    hidden = int(data["hidden_size"])
    return ModelSpec(name, int(data["num_hidden_layers"]), hidden, heads,
                     int(data.get("num_key_value_heads") or heads), int(data.get("head_dim") or hidden // heads),
                     int(data.get("intermediate_size") or 4 * hidden), int(data["vocab_size"]),
                     bool(data.get("tie_word_embeddings", False)),
                     qk_norm=str(data.get("model_type", "")).startswith("qwen3"))


def model_spec(cfg: Mapping, name: str) -> ModelSpec | None:
    """The architecture of model ``name`` (a hub id, a local folder, or ``tiny``/``base`` of the config)."""
    if name == "base":
        name = cfg["model"]["base"]
    if name == "tiny":
        t = cfg["model"].get("tiny") or {}
        local = Path(cfg.get("results_dir", "results")) / "models" / "tiny" / "config.json"
        if local.is_file():
            return spec_from_hf_config("tiny", json.loads(local.read_text(encoding="utf-8")))
        h = int(t.get("hidden_size", 64))  # codegrpo.models.tiny_config's layout
        return ModelSpec("tiny", int(t.get("num_layers", 2)), h, 4, 2, h // 4, 2 * h, int(t.get("vocab_size", 1024)),
                         tied=True)
    from codegrpo import packaged

    if pname := packaged.parse_ref(name):  # the folder rule packaged_model writes, once it exists
        local = Path(cfg.get("results_dir", "results")) / "models" / pname / "config.json"
        return spec_from_hf_config(name, json.loads(local.read_text(encoding="utf-8"))) if local.is_file() else None
    if name in KNOWN_MODELS:
        return KNOWN_MODELS[name]
    path = Path(os.path.expanduser(name)) / "config.json"
    if path.is_file():
        return spec_from_hf_config(name, json.loads(path.read_text(encoding="utf-8")))
    return None


def gpu_memory_gb(cfg: Mapping) -> tuple[float | None, str]:
    """The configured GPU's memory (GB) and where the figure comes from."""
    cl = cfg.get("cluster") or {}
    if cl.get("gpu_memory_gb"):
        return float(cl["gpu_memory_gb"]), "cluster.gpu_memory_gb"
    model = str(cl.get("gpu_model") or "").lower()
    if model in GPUS:
        return GPUS[model][0], f"cluster.gpu_model = {model}"
    return None, "unknown (set cluster.gpu_memory_gb or a known cluster.gpu_model)"


def server_memory_fraction(embedding: Mapping) -> float:
    """The embedding server's ``--gpu-memory-utilization`` (from ``embedding.server_command``; vLLM's 0.9 when
    the command does not set it)."""
    import re

    m = re.search(r"--gpu-memory-utilization[ =]([0-9.]+)", str(embedding.get("server_command") or ""))
    return float(m.group(1)) if m else 0.9


RM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def reward_model_memory(cfg: Mapping, rm: Mapping) -> dict:
    """GPU memory (GB) of a reward-model scoring server (:mod:`codegrpo.rm_server`) on its one GPU: the backbone's
    weights in its dtype (the server loads no ``lm_head``), one forward pass over ``batch_size`` chats of
    ``max_length`` tokens without a KV cache (per token: the residual stream and attention output, 4 x hidden,
    and the SwiGLU MLP's three ffn-wide tensors) and 1 GB of CUDA context; ``gpu_memory_gb`` overrides it."""
    if rm.get("gpu_memory_gb") is not None:
        return {"model": rm.get("model"), "peak_gb": float(rm["gpu_memory_gb"]), "source": "gpu_memory_gb"}
    spec = model_spec(cfg, str(rm.get("model") or ""))
    if spec is None:
        return {"model": rm.get("model"), "peak_gb": None,
                "source": "unknown architecture (set dhrcl.reward_model.gpu_memory_gb)"}
    b = RM_DTYPE_BYTES[str(rm.get("dtype") or "float32")]
    backbone = spec.params - (0 if spec.tied else spec.vocab * spec.hidden)
    tokens = int(rm.get("batch_size") or 8) * int(rm.get("max_length") or 8192)
    weights = b * backbone
    act = tokens * (4 * spec.hidden + 3 * spec.ffn) * b
    return {"model": rm.get("model"), "weights_gb": weights / GB, "activations_gb": act / GB,
            "tokens_per_pass": tokens, "peak_gb": (weights + act) / GB + 1.0, "source": "estimate"}


def gpu_peak_tflops(cfg: Mapping) -> float:
    model = str((cfg.get("cluster") or {}).get("gpu_model") or "").lower()
    return GPUS[model][1] if model in GPUS else THROUGHPUT.default_peak_tflops


# ------------------------------------------------------------------------------------------------------------
# step arithmetic


def rl_batches_per_epoch(rows: int, train_batch_size: int) -> int:
    """verl's RL train loader: ``drop_last=True`` batches of ``train_batch_size`` prompts."""
    return int(rows) // int(train_batch_size)


def sft_batches_per_epoch(rows: int, train_batch_size: int, world: int) -> int:
    """verl's SFT loader: DistributedSampler(drop_last=True) over ``world`` ranks, per-rank batches of
    ``train_batch_size // world`` with ``drop_last=True``."""
    per_rank = int(train_batch_size) // int(world)
    return (int(rows) // int(world)) // per_rank if per_rank else 0


def epochs_for_steps(total_training_steps: int | None, batches_per_epoch: int, configured_epochs: int) -> int:
    """The ``total_epochs`` verl must be given so that its loop reaches ``total_training_steps`` (null: the
    configured epochs). Never fewer than configured; ``ValueError`` when an epoch has no batch."""
    if batches_per_epoch <= 0:
        raise ValueError("the training data fills no batch")
    if total_training_steps is None:
        return int(configured_epochs)
    return max(int(configured_epochs), math.ceil(int(total_training_steps) / batches_per_epoch))


def step_plan(section: Mapping, rows: int | None, *, kind: str, world: int = 1) -> dict:
    """Steps per epoch, the epochs verl gets and the total steps of one training job."""
    bs = int(section["train_batch_size"])
    steps = section.get("total_training_steps")
    out: dict[str, Any] = {"rows": rows, "train_batch_size": bs, "configured_epochs": int(section["total_epochs"]),
                           "total_training_steps": steps}
    if rows is None:
        out.update(batches_per_epoch=None, epochs=None, total_steps=steps, reachable=None)
        return out
    bpe = rl_batches_per_epoch(rows, bs) if kind == "rl" else sft_batches_per_epoch(rows, bs, world)
    out["batches_per_epoch"] = bpe
    if bpe <= 0:
        out.update(epochs=None, total_steps=0, reachable=False)
        return out
    epochs = epochs_for_steps(steps, bpe, section["total_epochs"])
    total = int(steps) if steps is not None else bpe * epochs
    out.update(epochs=epochs, total_steps=total, reachable=bpe * epochs >= total)
    return out


def saves(total_steps: int, save_freq: int) -> int:
    """Checkpoints a run writes: every ``save_freq`` steps and at the last step."""
    if total_steps <= 0:
        return 0
    return total_steps // save_freq + (1 if total_steps % save_freq else 0)


# ------------------------------------------------------------------------------------------------------------
# memory


def activation_bytes(spec: ModelSpec, tokens: int, *, recompute: bool, mem: MemoryModel = MEMORY) -> float:
    """Activation memory of one micro-batch of ``tokens`` (= s x b) tokens (Korthikanti et al. 2022's form, see the
    module docstring, with the measured constant of :class:`MemoryModel`): ``act_sbh_per_layer`` s b h per layer,
    or 2 s b h per layer plus one layer's full activations when recomputing."""
    sbh = float(tokens) * spec.hidden
    if recompute:
        return spec.layers * mem.act_sbh_per_layer_recompute * sbh + mem.act_sbh_per_layer * sbh
    return spec.layers * mem.act_sbh_per_layer * sbh


def state_bytes(params: float, world: int, *, param_offload: bool = False, optimizer_offload: bool = False,
                mem: MemoryModel = MEMORY) -> float:
    """FSDP (ZeRO-3) model + gradient + Adam state per GPU: 16 bytes/param over the world size."""
    per_param = mem.state_bytes_per_param
    if param_offload:
        per_param -= mem.param_bytes
    if optimizer_offload:
        per_param -= mem.optimizer_bytes
    return per_param * params / world


def rl_memory(spec: ModelSpec, s: Mapping, world: int, gpu_gb: float | None, *, extra_gb: float = 0.0,
              mem: MemoryModel = MEMORY) -> dict:
    """Per-GPU memory of an RL job in its two phases (training and rollout), in GB."""
    P = spec.params
    seq = int(s["max_prompt_length"]) + int(s["max_response_length"])
    micro = int(s["ppo_micro_batch_size_per_gpu"])
    tokens = seq * micro
    state = state_bytes(P, world, param_offload=s.get("param_offload", False),
                        optimizer_offload=s.get("optimizer_offload", False), mem=mem)
    ref = 0.0 if s.get("ref_param_offload", True) else mem.ref_bytes_per_param * P / world
    gather = 2 * 2 * spec.layer_params  # FSDP all-gathers one bf16 layer (and prefetches the next)
    recompute = bool(s.get("gradient_checkpointing", False))
    act = activation_bytes(spec, tokens, recompute=recompute, mem=mem)
    act_other = activation_bytes(spec, tokens, recompute=not recompute, mem=mem)
    logits = tokens * spec.vocab * mem.logits_bytes_per_element
    # log-prob passes (old / ref) run without grad: one layer's activations and the logits of their micro-batch
    lp_micro = max(int(s.get("rollout_log_prob_micro_batch_size_per_gpu", 1)),
                   int(s.get("ref_log_prob_micro_batch_size_per_gpu", 1)))
    logprob = lp_micro * seq * (spec.hidden * mem.act_sbh_per_layer + spec.vocab * mem.logits_bytes_per_element)
    overhead = mem.overhead_gb * GB + extra_gb * GB
    train_peak = state + ref + gather + max(act + logits, logprob) + overhead
    tp = int(s.get("tensor_model_parallel_size", 1))
    util = float(s.get("gpu_memory_utilization", 0.8))
    rollout_weights = mem.rollout_weight_bytes_per_param * P / tp
    out = {
        "state_gb": state / GB, "ref_gb": ref / GB, "activations_gb": act / GB,
        "activations_other_setting_gb": act_other / GB, "logits_gb": logits / GB, "logprob_pass_gb": logprob / GB,
        "micro_batch_tokens": tokens, "gradient_checkpointing": recompute, "overhead_gb": overhead / GB,
        "train_peak_gb": train_peak / GB, "rollout_weights_gb": rollout_weights / GB,
        "gpu_gb": gpu_gb,
    }
    if gpu_gb:
        engine = util * gpu_gb * GB
        kv = max(0.0, engine - rollout_weights - 1.0 * GB)  # vLLM's own activation / graph reserve: 1 GB
        engines = max(1, world // tp)
        batch_tokens = int(s["train_batch_size"]) * int(s.get("n", 1)) * seq / engines
        out.update(rollout_engine_gb=engine / GB, kv_cache_gb=kv / GB,
                   kv_cache_tokens=int(kv / spec.kv_bytes_per_token(mem)), rollout_tokens_per_engine=int(batch_tokens),
                   rollout_peak_gb=(state + ref + engine + overhead) / GB)
        out["peak_gb"] = max(out["train_peak_gb"], out["rollout_peak_gb"])
        out["fits"] = out["peak_gb"] <= gpu_gb and kv > 0
    else:
        out.update(peak_gb=out["train_peak_gb"], fits=None)
    return out


def sft_memory(spec: ModelSpec, s: Mapping, world: int, gpu_gb: float | None, mem: MemoryModel = MEMORY) -> dict:
    P = spec.params
    tokens = int(s["micro_batch_size_per_gpu"]) * int(s["max_length"])
    off = bool(s.get("offload", False))
    state = state_bytes(P, world, param_offload=off, optimizer_offload=off, mem=mem)
    recompute = bool(s.get("gradient_checkpointing", False))
    act = activation_bytes(spec, tokens, recompute=recompute, mem=mem)
    logits = tokens * spec.vocab * mem.logits_bytes_per_element
    peak = state + 4 * spec.layer_params + act + logits + mem.overhead_gb * GB
    return {"state_gb": state / GB, "activations_gb": act / GB, "logits_gb": logits / GB,
            "micro_batch_tokens": tokens, "gradient_checkpointing": recompute, "train_peak_gb": peak / GB,
            "peak_gb": peak / GB, "gpu_gb": gpu_gb, "fits": (peak / GB <= gpu_gb) if gpu_gb else None}


# ------------------------------------------------------------------------------------------------------------
# the plan


def _parquet_rows(paths: list[Path]) -> int | None:
    if not paths or not all(p.is_file() for p in paths):
        return None
    try:
        import pyarrow.parquet as pq
    except ImportError:  # an environment without pyarrow: the expected rows stand in
        return None

    return sum(pq.read_metadata(p).num_rows for p in paths)


TRAIN_FILES = {"sft_skeleton": ("sft", "skeleton.train.parquet"), "sft_skin": ("sft", "skin.train.parquet"),
               "skeleton_rl": ("rl", "skeleton.train.parquet"), "skin_rl": ("rl", "skin.train.parquet"),
               "dhrcl": ("kodcode", "train.parquet")}


def plan_rows(cfg: Mapping, key: str, *, use_files: bool = True) -> tuple[int | None, str]:
    """Training rows of a job (key: sft_skeleton, sft_skin, skeleton_rl, skin_rl, dhrcl) and their source: the
    built Parquet file's row count (unless not ``use_files``), else ``budget.expected_rows``."""
    folder, name = TRAIN_FILES[key]
    path = Path(cfg.get("results_dir", "results")) / "data" / folder / name
    rows = _parquet_rows([path]) if use_files else None
    if rows is not None:
        return rows, str(path)
    expected = ((cfg.get("budget") or {}).get("expected_rows") or {}).get(key)
    if expected is not None:
        return int(expected), f"budget.expected_rows.{key}"
    return None, f"unknown ({path} not built; set budget.expected_rows.{key})"


def _world(cfg: Mapping, s: Mapping) -> int:
    if cfg["device"] == "cpu":
        return 1
    return int(s.get("nnodes", 1)) * int(s.get("n_gpus_per_node", 1))


def _rl_flops(P: float, s: Mapping) -> tuple[float, float]:
    """(rollout FLOPs, training + log-prob FLOPs) of one RL step (full-length sequences)."""
    seqs = int(s["train_batch_size"]) * int(s.get("n", 1))
    tokens = seqs * (int(s["max_prompt_length"]) + int(s["max_response_length"]))
    rollout = 2 * P * tokens
    train = (2 * 2 + 6 * int(s.get("ppo_epochs", 1))) * P * tokens
    return rollout, train


def _job(cfg: Mapping, run: str, stage: str, path: str, s: Mapping, model: str, rows_key: str, kind: str,
         gpu_gb: float | None, use_files: bool = True) -> dict:
    rows, source = plan_rows(cfg, rows_key, use_files=use_files)
    world = _world(cfg, s)
    steps = step_plan(s, rows, kind=kind, world=world)
    spec = model_spec(cfg, model)
    if model == "base":
        model = cfg["model"]["base"]
    job: dict[str, Any] = {"run": run, "stage": stage, "section": path, "kind": kind, "model": model,
                           "params": spec.params if spec else None, "world": world, "rows_source": source, **steps}
    total = steps["total_steps"] or 0
    save_freq = int(s["save_freq"])
    n_saves = saves(total, save_freq)
    if kind == "rl":
        keep = s.get("max_checkpoints_to_keep")
        kept = min(n_saves, int(keep)) if keep else n_saves
        per = MEMORY.rl_checkpoint_bytes_per_param
    else:
        keep, kept, per = None, n_saves, MEMORY.sft_checkpoint_bytes_per_param
    job.update(saves=n_saves, max_checkpoints_to_keep=keep, checkpoints_kept=kept)
    if spec:
        ckpt = per * spec.params / GB
        job.update(checkpoint_gb=ckpt, disk_gb=kept * ckpt + MEMORY.export_bytes_per_param * spec.params / GB)
    if stage == "dhrcl" and steps["total_training_steps"]:
        job["curriculum"] = curriculum_plan(cfg, run)
    if cfg["device"] == "cpu" or spec is None:
        job["memory"] = None
        job["gpu_hours"] = 0.0 if cfg["device"] == "cpu" else None
        return job
    if kind == "rl":
        extra = 0.0
        emb = cfg.get("embedding") or {}
        if stage == "skin_rl" and emb.get("serve") and gpu_gb:
            extra = server_memory_fraction(emb) * gpu_gb  # the server shares a training GPU
        rm = _reward_model_section(cfg, run) if stage == "dhrcl" else None
        if rm is not None:  # the reward-model server shares a training GPU
            job["reward_model"] = reward_model_memory(cfg, rm)
            extra += job["reward_model"]["peak_gb"] or 0.0
        job["memory"] = rl_memory(spec, s, world, gpu_gb, extra_gb=extra)
        roll, train = _rl_flops(spec.params, s)
        peak = gpu_peak_tflops(cfg) * 1e12
        secs = total * (roll / (THROUGHPUT.rollout_mfu * peak * world) + train / (THROUGHPUT.train_mfu * peak * world))
    else:
        job["memory"] = sft_memory(spec, s, world, gpu_gb)
        tokens = int(s["train_batch_size"]) * int(s["max_length"]) * total
        secs = 6 * spec.params * tokens / (THROUGHPUT.train_mfu * gpu_peak_tflops(cfg) * 1e12 * world)
    job["gpu_hours"] = secs * world / 3600.0
    job["wall_hours"] = secs / 3600.0
    return job


def _reward_model_section(cfg: Mapping, run: str) -> dict | None:
    """The resolved ``dhrcl.reward_model`` of DHRCL run ``run`` when its variant scores with a reward model."""
    from codegrpo.runsettings import schema_defaults
    from codegrpo.verl.dhrcl import plan_runs, resolve_variant

    dcfg = cfg["dhrcl"]
    if resolve_variant(dcfg, plan_runs(cfg)[run]["variant"])["reward"] != "reward_model":
        return None
    return {**schema_defaults("dhrcl", "reward_model"), **dict(dcfg.get("reward_model") or {})}


def curriculum_plan(cfg: Mapping, run: str) -> dict:
    """The step at which each curriculum cap (or fixed schedule) fires for DHRCL run ``run``."""
    from codegrpo.verl.dhrcl import curriculum_config, resolve_variant

    from codegrpo.verl.dhrcl import plan_runs

    variant = plan_runs(cfg)[run]["variant"]
    dcfg = cfg["dhrcl"]
    total = int(dcfg["training"]["total_training_steps"])
    vdef = resolve_variant(dcfg, variant)
    if vdef["curriculum"] == "none":
        return {"kind": "none"}
    c = curriculum_config(dcfg, vdef, total)
    if c.forced_schedule:
        lens, kind = list(c.forced_schedule), "fixed"
    else:
        lens, kind = [c.max_steps_for(1), c.max_steps_for(2)], "trend (caps)"
    return {"kind": kind, "stage_lengths": lens, "stage2_by_step": lens[0], "stage3_by_step": lens[0] + lens[1],
            "total_steps": total}


def plan_jobs(cfg: Mapping, *, use_files: bool = True) -> list[dict]:
    """One entry per training job of the plan."""
    gpu_gb, _ = gpu_memory_gb(cfg)
    jobs = []
    sft = cfg.get("sft") or {}
    imports = sft.get("import") or {}
    for which in ("skeleton", "skin"):
        if sft and not imports.get(which):
            jobs.append(_job(cfg, f"sft_{which}", "sft", "sft", sft, "base", f"sft_{which}", "sft", gpu_gb, use_files))
    for stage in RL_STAGES:
        s = cfg.get(stage)
        if s and not s.get("import"):
            jobs.append(_job(cfg, stage, stage, stage, s, "base", stage, "rl", gpu_gb, use_files))
    d = cfg.get("dhrcl") or {}
    if d.get("training") and not d["training"].get("import"):
        from codegrpo.verl.dhrcl import model_cfg, plan_runs

        for run, r in plan_runs(cfg).items():
            mcfg = model_cfg(cfg, r["model"], r["variant"])
            job = _job(mcfg, run, "dhrcl", "dhrcl.training", mcfg["dhrcl"]["training"], r["init"], "dhrcl", "rl",
                       gpu_gb, use_files)
            if r["model"] is not None:  # the keys this size overrides are changed in its own entry
                entry = next(m for m in d["models"] if m["name"] == r["model"])
                job["overrides"] = {"path": f"dhrcl.models[{r['model']}].training",
                                    "keys": sorted((entry.get("training") or {}).keys())}
            jobs.append(job)
    return jobs


def eval_memory(spec: ModelSpec, ev: Mapping, max_new_tokens: int, gpu_gb: float | None,
                mem: MemoryModel = MEMORY) -> dict:
    """One vLLM evaluation engine: its share of the GPU, the bf16 weights per tensor-parallel rank, and the KV
    cache's capacity against ``max_model_len`` (vLLM refuses to start when one sequence does not fit)."""
    v = ev.get("vllm") or {}
    tp = int(v.get("tensor_parallel_size") or 1)
    max_len = int(v.get("max_model_len") or (int(ev["max_prompt_tokens"]) + int(max_new_tokens)))
    weights = mem.rollout_weight_bytes_per_param * spec.params / tp
    out = {"weights_gb": weights / GB, "max_model_len": max_len, "gpu_gb": gpu_gb, "tensor_parallel_size": tp}
    if gpu_gb:
        engine = float(v.get("gpu_memory_utilization", 0.9)) * gpu_gb * GB
        kv = max(0.0, engine - weights - 1.0 * GB)
        tokens = int(kv / (spec.kv_bytes_per_token(mem) / tp))
        out.update(engine_gb=engine / GB, kv_cache_tokens=tokens, fits=tokens >= max_len)
    else:
        out["fits"] = None
    return out


# Problems per code-generation benchmark (the published releases the config names); kodcode_heldout comes from
# the config (budget.expected_rows.dhrcl x data.kodcode.heldout_fraction). LiveCodeBench v6 counts every problem
# of the release (the configured date window takes fewer): an upper bound.
EVAL_PROBLEMS = {"humaneval": 164, "humaneval_plus": 164, "mbpp_plus": 378, "bigcodebench_full": 1140,
                 "bigcodebench_hard": 148, "livecodebench": 1055}
DECOMPILE_TASKS = 164 * 4  # per benchmark: 164 functions x 4 optimisation levels (HumanEval- and MBPP-Decompile)


def eval_gpu_hours(spec: ModelSpec, generated_tokens: float, prompt_tokens: float, cfg: Mapping) -> float:
    """GPU-hours of generating ``generated_tokens`` after ``prompt_tokens`` of prompts: 2 Ψ FLOPs per token at
    the rollout's utilisation (decoding is memory-bound; prefill counted at the same rate, an upper bound)."""
    flops = 2.0 * spec.params * (generated_tokens + prompt_tokens)
    return flops / (THROUGHPUT.rollout_mfu * gpu_peak_tflops(cfg) * 1e12) / 3600.0


def _codegen_tokens(cfg: Mapping, gen: Mapping) -> tuple[float, float]:
    """(generated, prompt) token upper bounds of one run's code-generation job: every benchmark's problems x
    samples, each response at max_new_tokens, each prompt at evaluate.max_prompt_tokens."""
    n = int(gen.get("n_samples") or 1)
    heldout = ((cfg.get("budget") or {}).get("expected_rows") or {}).get("dhrcl") or 0
    frac = float(((cfg.get("data") or {}).get("kodcode") or {}).get("heldout_fraction") or 0.0)
    sizes = dict(EVAL_PROBLEMS, kodcode_heldout=int(heldout * frac))
    limit = int(gen.get("limit") or 0)
    problems = sum(min(sizes.get(b, 0), limit) if limit else sizes.get(b, 0) for b in gen.get("benchmarks") or [])
    return (problems * n * int(gen.get("max_new_tokens", 512)),
            problems * n * int((cfg.get("evaluate") or {}).get("max_prompt_tokens") or 0))


def plan_eval_jobs(cfg: Mapping) -> list[dict]:
    """The GPU evaluation jobs (vLLM back-end): one code-generation job per DHRCL run, one decompilation job per
    system (skeleton then skin, one engine at a time): memory and GPU-hours (:func:`eval_gpu_hours`, from token
    upper bounds: every response at its maximum length)."""
    ev = cfg.get("evaluate") or {}
    if cfg["device"] == "cpu" or ev.get("backend") == "transformers" or not ev.get("vllm"):
        return []
    gpu_gb, _ = gpu_memory_gb(cfg)
    jobs = []
    gen = ev.get("codegen") or {}
    d = cfg.get("dhrcl") or {}
    if gen and d.get("training"):
        from codegrpo.verl.dhrcl import plan_runs

        runs = plan_runs(cfg)
        for run in (gen.get("runs") or list(runs)):
            r = runs.get(run)
            init = r["init"] if r else d.get("init", "base")
            spec = model_spec(cfg, init)
            if spec:
                generated, prompts = _codegen_tokens(cfg, gen)
                jobs.append({"job": f"eval_codegen {run}", "model": cfg["model"]["base"] if init == "base" else init,
                             "memory": eval_memory(spec, ev, int(gen.get("max_new_tokens", 512)), gpu_gb),
                             "generated_tokens": generated,
                             "gpu_hours": eval_gpu_hours(spec, generated, prompts, cfg)})
    dec = ev.get("decompile") or {}
    spec = model_spec(cfg, "base")
    if dec.get("systems") and spec:
        m = eval_memory(spec, ev, int(dec.get("max_new_tokens", 512)), gpu_gb)
        benchmarks = 1 + int(bool((dec.get("mbpp") or {}).get("enabled")))
        for s in dec["systems"]:
            phases = 2 if s.get("skin") else 1  # skeleton, then skin on its output
            tasks = DECOMPILE_TASKS * benchmarks * phases
            generated = tasks * int(dec.get("max_new_tokens", 512))
            prompts = tasks * int(ev.get("max_prompt_tokens") or 0)
            jobs.append({"job": f"eval_decompile_system {s['name']}", "model": cfg["model"]["base"], "memory": m,
                         "generated_tokens": generated, "gpu_hours": eval_gpu_hours(spec, generated, prompts, cfg)})
    return jobs


def build_budget(cfg: Mapping, *, use_files: bool = True) -> dict:
    """The budget of the plan (``use_files=False``: rows from ``budget.expected_rows`` even where the data stage
    has built its files, as for the checked-in paper table)."""
    jobs = plan_jobs(cfg, use_files=use_files)
    gpu_gb, gpu_source = gpu_memory_gb(cfg)
    disk = sum(j.get("disk_gb") or 0.0 for j in jobs)
    hours = sum(j.get("gpu_hours") or 0.0 for j in jobs)
    quota = (cfg.get("cluster") or {}).get("scratch_quota")
    evals = plan_eval_jobs(cfg)
    out = {"device": cfg["device"], "gpu_memory_gb": gpu_gb, "gpu_memory_source": gpu_source,
           "scratch_quota_gb": quota, "jobs": jobs, "eval_jobs": evals,
           "totals": {"jobs": len(jobs), "disk_gb": disk, "gpu_hours": hours,
                      "eval_gpu_hours": sum(e.get("gpu_hours") or 0.0 for e in evals),
                      "steps": sum(j.get("total_steps") or 0 for j in jobs)},
           "memory_model": dataclasses.asdict(MEMORY), "throughput_model": dataclasses.asdict(THROUGHPUT)}
    out["problems"] = budget_problems(out)
    return out


def _key(job: Mapping, key: str) -> str:
    """The config key that sets ``key`` for ``job`` (a model size's own entry when it overrides it)."""
    o = job.get("overrides")
    return f"{o['path']}.{key}" if o and key in o["keys"] else f"{job['section']}.{key}"


def budget_problems(budget: Mapping) -> list[str]:
    """What cannot run as planned, each with the number and the key to change."""
    problems = []
    for j in budget["jobs"]:
        run = j["run"]
        if j.get("batches_per_epoch") == 0:
            problems.append(
                f"{run}: {j['rows']} training rows ({j['rows_source']}) fill no batch of "
                f"{_key(j, 'train_batch_size')} = {j['train_batch_size']}"
                + (f" over {j['world']} GPUs" if j["kind"] == "sft" else "")
                + f"; lower {_key(j, 'train_batch_size')} to at most {j['rows']} or configure more data")
        m = j.get("memory")
        if m and m.get("fits") is False:
            hint = (f"set {_key(j, 'gradient_checkpointing')}: true" if not m["gradient_checkpointing"]
                    else f"lower {_key(j, 'ppo_micro_batch_size_per_gpu')}" if j["kind"] == "rl"
                    else f"lower {_key(j, 'micro_batch_size_per_gpu')}")
            if j["kind"] == "rl" and m.get("rollout_peak_gb", 0) >= m["train_peak_gb"]:
                hint = (f"lower {_key(j, 'gpu_memory_utilization')} (rollout engine "
                        f"{m['rollout_engine_gb']:.1f} GB)")
            problems.append(
                f"{run}: about {m['peak_gb']:.1f} GB per GPU (training {m['train_peak_gb']:.1f}"
                + (f", rollout {m['rollout_peak_gb']:.1f}" if "rollout_peak_gb" in m else "")
                + f") exceeds the GPU's {m['gpu_gb']:.0f} GB ({budget['gpu_memory_source']}); {hint}")
    for e in budget.get("eval_jobs") or []:
        m = e["memory"]
        if m.get("fits") is False:
            problems.append(
                f"{e['job']}: the vLLM engine's KV cache holds {m['kv_cache_tokens']} tokens, less than one "
                f"sequence of max_model_len {m['max_model_len']} (weights {m['weights_gb']:.1f} GB of the engine's "
                f"{m['engine_gb']:.1f} GB); raise evaluate.vllm.gpu_memory_utilization or "
                f"evaluate.vllm.tensor_parallel_size, or lower evaluate.max_prompt_tokens")
    quota = budget.get("scratch_quota_gb")
    if quota and budget["totals"]["disk_gb"] > float(quota):
        problems.append(
            f"the plan keeps about {budget['totals']['disk_gb']:.0f} GB of checkpoints and exported models, over "
            f"cluster.scratch_quota = {quota} GB; lower max_checkpoints_to_keep of the RL sections (or sft.save_freq"
            f"), or raise cluster.scratch_quota")
    return problems


# ------------------------------------------------------------------------------------------------------------
# report


def _f(v, fmt="{:.1f}"):
    return "–" if v is None else fmt.format(v)


def budget_markdown(budget: Mapping, *, command: str | None = None) -> str:
    lines = ["# Plan-time budget", ""]
    if command:
        lines += [f"Regenerate with `{command}`.", ""]
    lines += [f"Device: {budget['device']}; GPU memory: {_f(budget['gpu_memory_gb'], '{:.0f}')} GB "
              f"({budget['gpu_memory_source']}); scratch quota: {_f(budget['scratch_quota_gb'], '{:.0f}')} GB.", "",
              "Rows are the Parquet files' when the data stage has run, else `budget.expected_rows`. Epochs are "
              "what verl is given: enough for the step budget (ceil(steps / batches per epoch)). Memory and "
              "GPU-hours follow the model of `codegrpo/budget.py` (docs/budget.md); they are estimates.", "",
              "| run | model | rows | batches/epoch | epochs | steps | curriculum caps (stage 2 / 3 by step) | "
              "checkpoints kept × GB | disk GB | train peak GB/GPU | rollout peak GB/GPU | GPU | fits | GPU-hours |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for j in budget["jobs"]:
        c = j.get("curriculum")
        caps = "–" if not c else ("none" if c["kind"] == "none" else
                                  f"{c['kind']}: {c['stage2_by_step']} / {c['stage3_by_step']}")
        m = j.get("memory") or {}
        fits = {True: "yes", False: "**NO**", None: "–"}[m.get("fits")]
        lines.append(
            f"| {j['run']} | {j['model']} | {_f(j['rows'], '{:d}')} | {_f(j['batches_per_epoch'], '{:d}')} | "
            f"{_f(j['epochs'], '{:d}')} | {_f(j['total_steps'], '{:d}')} | {caps} | "
            f"{j['checkpoints_kept']} × {_f(j.get('checkpoint_gb'), '{:.3g}')} | {_f(j.get('disk_gb'), '{:.3g}')} | "
            f"{_f(m.get('train_peak_gb'))} | {_f(m.get('rollout_peak_gb'))} | {_f(m.get('gpu_gb'), '{:.0f}')} | "
            f"{fits} | {_f(j.get('gpu_hours'))} |")
    t = budget["totals"]
    lines += ["", f"Totals: {t['jobs']} training jobs, {t['steps']} steps, about {t['disk_gb']:.0f} GB on disk once "
                  f"every job has run (checkpoints kept + exported models), about {t['gpu_hours']:.0f} GPU-hours of "
                  f"training" + (f" and at most {t['eval_gpu_hours']:.0f} of evaluation" if t.get("eval_gpu_hours")
                                  else "") + ".", ""]
    rl = [j for j in budget["jobs"] if j.get("memory") and j["kind"] == "rl"]
    if rl:
        lines += ["Memory per GPU (GB) of each distinct RL plan:", "",
                  "| run | FSDP state | activations (other setting) | logits | rollout engine | KV cache tokens / "
                  "rollout tokens per engine |", "|---|---|---|---|---|---|"]
        seen = set()
        for j in rl:
            m = j["memory"]
            key = (j["section"], j["model"])
            if key in seen:
                continue
            seen.add(key)
            lines.append(
                f"| {j['run']} | {m['state_gb']:.1f} | {m['activations_gb']:.1f} "
                f"({m['activations_other_setting_gb']:.1f} with gradient checkpointing "
                f"{'off' if m['gradient_checkpointing'] else 'on'}) | {m['logits_gb']:.1f} | "
                f"{_f(m.get('rollout_engine_gb'))} | {_f(m.get('kv_cache_tokens'), '{:d}')} / "
                f"{_f(m.get('rollout_tokens_per_engine'), '{:d}')} |")
        lines.append("")
    ev = budget.get("eval_jobs") or []
    if ev:
        lines += ["Evaluation jobs (vLLM, one engine at a time; GPU-hours from upper bounds: every response at its "
                  "maximum length, prompts at evaluate.max_prompt_tokens):", "",
                  "| job | model | weights GB / TP rank | engine GB | KV cache tokens | max_model_len | fits | "
                  "generated tokens (max) | GPU-hours (max) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for e in ev:
            m = e["memory"]
            fits = {True: "yes", False: "**NO**", None: "–"}[m.get("fits")]
            lines.append(f"| {e['job']} | {e['model']} | {m['weights_gb']:.1f} | {_f(m.get('engine_gb'))} | "
                         f"{_f(m.get('kv_cache_tokens'), '{:d}')} | {m['max_model_len']} | {fits} | "
                         f"{_f(e.get('generated_tokens'), '{:.3g}')} | {_f(e.get('gpu_hours'))} |")
        lines.append("")
    if budget["problems"]:
        lines += ["## Problems (the plan is refused)", ""] + [f"- {p}" for p in budget["problems"]] + [""]
    else:
        lines += ["No problems: every job's steps are reachable and its memory and disk fit.", ""]
    return "\n".join(lines)


def write_budget(cfg: Mapping, out_json: str | os.PathLike | None, out_md: str | os.PathLike, *,
                 command: str | None = None, use_files: bool = True) -> dict:
    """``out_md`` (the tables) and ``out_json`` (everything, when given)."""
    from codegrpo.io import atomic_open, write_json

    budget = build_budget(cfg, use_files=use_files)
    if out_json:
        write_json(out_json, budget)
    with atomic_open(out_md) as fh:
        fh.write(budget_markdown(budget, command=command))
    return budget


def main(argv: list[str] | None = None) -> int:
    from codegrpo.config import load_config

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--md", default="results/budget.md")
    ap.add_argument("--json", default=None, help="also write the whole budget as JSON there")
    ap.add_argument("--data", action="store_true",
                    help="rows from the built Parquet files under results_dir where they exist (default: "
                         "budget.expected_rows, the plan before any data is built)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, check_files=False)
    cmd = f"python -m codegrpo.budget --config {args.config} --md {args.md}" + (" --data" if args.data else "")
    budget = write_budget(cfg, args.json, args.md, command=cmd, use_files=args.data)
    print(budget_markdown(budget))
    return 1 if budget["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The budget's constants and model architectures: the memory and throughput models (the calibration points),
GPU data sheets, the transformer shapes of the models the configs name, and the GPU lookups of the config."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path

GB = 1e9


@dataclasses.dataclass(frozen=True)
class MemoryModel:
    """Every constant of the memory model. A measured figure (e.g. the activation peak of one micro-batch on a
    real GPU) calibrates it by replacing a value here, e.g. ``dataclasses.replace(MEMORY, act_sbh_per_layer=40)``."""

    # ZeRO §3.1: fp16 params (2) + fp16 grads (2) + fp32 params, momentum, variance (K = 12) = 16 bytes/param;
    # verl's FSDP actor: fp32 params (4) + fp32 grads (4) + Adam m, v (8) = 16 bytes/param, sharded over the world
    state_bytes_per_param: float = 16.0
    param_bytes: float = 4.0  # of the 16: the fp32 parameters (param_offload moves them to CPU)
    optimizer_bytes: float = 8.0  # of the 16: the Adam moments (optimizer_offload moves them to CPU)
    ref_bytes_per_param: float = 2.0  # the bf16 reference model, sharded (0 on the GPU with ref_param_offload)
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
    kv_bytes_per_element: float = 2.0  # bf16 KV cache
    rollout_weight_bytes_per_param: float = 2.0  # bf16 weights in the rollout engine
    overhead_gb: float = 3.0  # CUDA context, NCCL, fragmentation (assumption)
    rl_checkpoint_bytes_per_param: float = 12.0  # fp32 model shards (4) + Adam moments (8)
    sft_checkpoint_bytes_per_param: float = 4.0  # fp32 model (verl 0.4.1 SFT save_pretrained)
    export_bytes_per_param: float = 2.0  # the run's exported bf16 Hugging Face model


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
    "a100-40gb": (40.0, 312.0),
    "a100": (80.0, 312.0),
    "a100-80gb": (80.0, 312.0),
    "h100": (80.0, 989.0),
    "h200": (141.0, 989.0),
    "h800": (80.0, 989.0),
    "l40s": (48.0, 362.0),
    "a6000": (48.0, 155.0),
    "a40": (48.0, 150.0),
    "v100": (32.0, 125.0),
    "b200": (180.0, 2250.0),
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
    "Qwen/Qwen3-Embedding-0.6B": ModelSpec(
        "Qwen3-Embedding-0.6B", 28, 1024, 16, 8, 128, 3072, 151669, tied=True, qk_norm=True
    ),
}


def spec_from_hf_config(name: str, data: Mapping) -> ModelSpec:
    heads = int(data["num_attention_heads"])
    hidden = int(data["hidden_size"])
    return ModelSpec(
        name,
        int(data["num_hidden_layers"]),
        hidden,
        heads,
        int(data.get("num_key_value_heads") or heads),
        int(data.get("head_dim") or hidden // heads),
        int(data.get("intermediate_size") or 4 * hidden),
        int(data["vocab_size"]),
        bool(data.get("tie_word_embeddings", False)),
        qk_norm=str(data.get("model_type", "")).startswith("qwen3"),
    )


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
        return ModelSpec(
            "tiny", int(t.get("num_layers", 2)), h, 4, 2, h // 4, 2 * h, int(t.get("vocab_size", 1024)), tied=True
        )
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
        return {
            "model": rm.get("model"),
            "peak_gb": None,
            "source": "unknown architecture (set dhrcl.reward_model.gpu_memory_gb)",
        }
    b = RM_DTYPE_BYTES[str(rm.get("dtype") or "float32")]
    backbone = spec.params - (0 if spec.tied else spec.vocab * spec.hidden)
    tokens = int(rm.get("batch_size") or 8) * int(rm.get("max_length") or 8192)
    weights = b * backbone
    act = tokens * (4 * spec.hidden + 3 * spec.ffn) * b
    return {
        "model": rm.get("model"),
        "weights_gb": weights / GB,
        "activations_gb": act / GB,
        "tokens_per_pass": tokens,
        "peak_gb": (weights + act) / GB + 1.0,
        "source": "estimate",
    }


def gpu_peak_tflops(cfg: Mapping) -> float:
    model = str((cfg.get("cluster") or {}).get("gpu_model") or "").lower()
    return GPUS[model][1] if model in GPUS else THROUGHPUT.default_peak_tflops

"""The per-GPU memory model (see :mod:`codegrpo.budget`): FSDP state, activations, logits, the rollout engine
and the vLLM evaluation engine."""

from __future__ import annotations

from collections.abc import Mapping

from codegrpo.budget.models import GB, MEMORY, MemoryModel, ModelSpec


def activation_bytes(spec: ModelSpec, tokens: int, *, recompute: bool, mem: MemoryModel = MEMORY) -> float:
    """Activation memory of one micro-batch of ``tokens`` (= s x b) tokens (Korthikanti et al. 2022's form, see
    :mod:`codegrpo.budget`, with the measured constant of :class:`MemoryModel`): ``act_sbh_per_layer`` s b h per
    layer, or 2 s b h per layer plus one layer's full activations when recomputing."""
    sbh = float(tokens) * spec.hidden
    if recompute:
        return spec.layers * mem.act_sbh_per_layer_recompute * sbh + mem.act_sbh_per_layer * sbh
    return spec.layers * mem.act_sbh_per_layer * sbh


def state_bytes(
    params: float,
    world: int,
    *,
    param_offload: bool = False,
    optimizer_offload: bool = False,
    mem: MemoryModel = MEMORY,
) -> float:
    """FSDP (ZeRO-3) model + gradient + Adam state per GPU: 16 bytes/param over the world size."""
    per_param = mem.state_bytes_per_param
    if param_offload:
        per_param -= mem.param_bytes
    if optimizer_offload:
        per_param -= mem.optimizer_bytes
    return per_param * params / world


def rl_memory(
    spec: ModelSpec, s: Mapping, world: int, gpu_gb: float | None, *, extra_gb: float = 0.0, mem: MemoryModel = MEMORY
) -> dict:
    """Per-GPU memory of an RL job in its two phases (training and rollout), in GB."""
    P = spec.params
    seq = int(s["max_prompt_length"]) + int(s["max_response_length"])
    micro = int(s["ppo_micro_batch_size_per_gpu"])
    tokens = seq * micro
    state = state_bytes(
        P,
        world,
        param_offload=s.get("param_offload", False),
        optimizer_offload=s.get("optimizer_offload", False),
        mem=mem,
    )
    ref = 0.0 if s.get("ref_param_offload", True) else mem.ref_bytes_per_param * P / world
    gather = 2 * 2 * spec.layer_params  # FSDP all-gathers one bf16 layer (and prefetches the next)
    recompute = bool(s.get("gradient_checkpointing", False))
    act = activation_bytes(spec, tokens, recompute=recompute, mem=mem)
    act_other = activation_bytes(spec, tokens, recompute=not recompute, mem=mem)
    logits = tokens * spec.vocab * mem.logits_bytes_per_element
    # log-prob passes (old / ref) run without grad: one layer's activations and the logits of their micro-batch
    lp_micro = max(
        int(s.get("rollout_log_prob_micro_batch_size_per_gpu", 1)),
        int(s.get("ref_log_prob_micro_batch_size_per_gpu", 1)),
    )
    logprob = lp_micro * seq * (spec.hidden * mem.act_sbh_per_layer + spec.vocab * mem.logits_bytes_per_element)
    overhead = mem.overhead_gb * GB + extra_gb * GB
    train_peak = state + ref + gather + max(act + logits, logprob) + overhead
    tp = int(s.get("tensor_model_parallel_size", 1))
    util = float(s.get("gpu_memory_utilization", 0.8))
    rollout_weights = mem.rollout_weight_bytes_per_param * P / tp
    out = {
        "state_gb": state / GB,
        "ref_gb": ref / GB,
        "activations_gb": act / GB,
        "activations_other_setting_gb": act_other / GB,
        "logits_gb": logits / GB,
        "logprob_pass_gb": logprob / GB,
        "micro_batch_tokens": tokens,
        "gradient_checkpointing": recompute,
        "overhead_gb": overhead / GB,
        "train_peak_gb": train_peak / GB,
        "rollout_weights_gb": rollout_weights / GB,
        "gpu_gb": gpu_gb,
    }
    if gpu_gb:
        engine = util * gpu_gb * GB
        kv = max(0.0, engine - rollout_weights - 1.0 * GB)  # vLLM's own activation / graph reserve: 1 GB
        engines = max(1, world // tp)
        batch_tokens = int(s["train_batch_size"]) * int(s.get("n", 1)) * seq / engines
        out.update(
            rollout_engine_gb=engine / GB,
            kv_cache_gb=kv / GB,
            kv_cache_tokens=int(kv / spec.kv_bytes_per_token(mem)),
            rollout_tokens_per_engine=int(batch_tokens),
            rollout_peak_gb=(state + ref + engine + overhead) / GB,
        )
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
    return {
        "state_gb": state / GB,
        "activations_gb": act / GB,
        "logits_gb": logits / GB,
        "micro_batch_tokens": tokens,
        "gradient_checkpointing": recompute,
        "train_peak_gb": peak / GB,
        "peak_gb": peak / GB,
        "gpu_gb": gpu_gb,
        "fits": (peak / GB <= gpu_gb) if gpu_gb else None,
    }


def eval_memory(
    spec: ModelSpec, ev: Mapping, max_new_tokens: int, gpu_gb: float | None, mem: MemoryModel = MEMORY
) -> dict:
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

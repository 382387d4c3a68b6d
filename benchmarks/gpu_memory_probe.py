"""Measure training activation memory and forward+backward throughput of the paper's model shapes on one GPU.

Calibrates the plan-time budget's memory and throughput model (``codegrpo.budget``, docs/budget-paper.md) with
real figures instead of formulas alone. Needs a CUDA GPU, PyTorch and transformers; no weights are downloaded:
each model is built from its architecture alone (random initialisation, bf16), which has the same memory and
compute as the released weights.

For each shape (layers cut to 2 and 4, so the difference is one decoder layer's share) and each setting
(micro-batch, sequence length, gradient checkpointing on/off) it records, in bytes:

* ``saved``: memory still allocated after the forward pass (what backward will need) minus parameters;
* ``peak``: the peak during forward + backward minus parameters (gradients included);
* ``per_layer_saved`` = (saved at 4 layers − saved at 2 layers) / 2, ``head_saved`` = saved − layers × per-layer;

and for the full-depth model (gradient checkpointing on, the paper's setting) the forward+backward time of one
micro-batch, as tokens per second (an upper bound for FSDP training throughput: no communication, SDPA attention).

Usage: ``python benchmarks/gpu_memory_probe.py --out probe.json`` (about 2-4 minutes on one H200).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time

# (hidden_size, intermediate_size, layers, attention heads, key/value heads, vocab_size) of a shape
SHAPE_KEYS = (
    "hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads vocab_size".split()
)
SHAPES = {
    # deepseek-coder-6.7b (SK²Decompile's base): Llama architecture
    "llama-6.7b": dict(arch="llama", **dict(zip(SHAPE_KEYS, (4096, 11008, 32, 32, 32, 32256)))),
    # Qwen3-8B (DHRCL's main size)
    "qwen3-8b": dict(arch="qwen3", **dict(zip(SHAPE_KEYS, (4096, 12288, 36, 32, 8, 151936))), head_dim=128),
}


def build(shape: dict, layers: int):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    kw = {k: v for k, v in shape.items() if k != "arch"}
    kw["num_hidden_layers"] = layers
    cls = LlamaConfig if shape["arch"] == "llama" else Qwen3Config
    cfg = cls(**kw, max_position_embeddings=8192, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        except TypeError:  # transformers < 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model.train()
    return model


def fwd_bwd(model, batch: int, seq: int, vocab: int):
    """One training micro-batch as verl's actor computes it: logits → fp32 log-softmax → token log-probs."""
    import torch

    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    logits = model(input_ids=ids, use_cache=False).logits
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return logp.mean()


def measure(model, batch: int, seq: int, vocab: int, ckpt: bool) -> dict:
    import torch

    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    model.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    try:
        loss = fwd_bwd(model, batch, seq, vocab)
        torch.cuda.synchronize()
        saved = torch.cuda.memory_allocated() - base
        loss.backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        out = {"saved": saved, "peak": peak, "oom": False}
    except torch.cuda.OutOfMemoryError:
        out = {"saved": None, "peak": None, "oom": True}
    model.zero_grad(set_to_none=True)
    loss = None
    gc.collect()
    torch.cuda.empty_cache()
    return out


def probe_shape(name: str, shape: dict, settings) -> dict:
    import torch

    res = {"shape": shape, "settings": []}
    per = {}
    for layers in (2, 4):
        model = build(shape, layers)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        for batch, seq, ckpt in settings:
            m = measure(model, batch, seq, shape["vocab_size"], ckpt)
            per[(layers, batch, seq, ckpt)] = (m, params)
        del model
        gc.collect()
        torch.cuda.empty_cache()
    for batch, seq, ckpt in settings:
        m2, _ = per[(2, batch, seq, ckpt)]
        m4, _ = per[(4, batch, seq, ckpt)]
        row = {
            "micro_batch": batch,
            "seq": seq,
            "grad_ckpt": ckpt,
            "saved_2": m2["saved"],
            "saved_4": m4["saved"],
            "peak_2": m2["peak"],
            "peak_4": m4["peak"],
        }
        if m2["saved"] is not None and m4["saved"] is not None:
            pl = (m4["saved"] - m2["saved"]) / 2
            row["per_layer_saved"] = pl
            row["head_saved"] = m2["saved"] - 2 * pl
            tokens = batch * seq
            row["per_layer_bytes_per_token"] = pl / tokens
            row["head_bytes_per_token"] = row["head_saved"] / tokens
            row["per_layer_bytes_per_token_per_hidden"] = pl / tokens / shape["hidden_size"]
        res["settings"].append(row)
    return res


def throughput(shape: dict, batch: int, seq: int, repeats: int = 3) -> dict:
    import torch

    model = build(shape, shape["num_hidden_layers"])
    n = sum(p.numel() for p in model.parameters())
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    times = []
    for i in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fwd_bwd(model, batch, seq, shape["vocab_size"]).backward()
        torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    peak = torch.cuda.max_memory_allocated()
    del model
    gc.collect()
    torch.cuda.empty_cache()
    t = sorted(times)[len(times) // 2]
    tok = batch * seq
    # 6 N FLOPs per token for forward + backward, 8 N with the recomputed forward of gradient checkpointing
    return {
        "params": n,
        "micro_batch": batch,
        "seq": seq,
        "grad_ckpt": True,
        "median_s": t,
        "times_s": times,
        "tokens_per_s": tok / t,
        "model_tflops_6N": 6 * n * tok / t / 1e12,
        "peak_bytes": peak,
    }


def main(argv=None) -> int:
    import torch
    import transformers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args(argv)
    settings = [(1, 3072, False), (4, 3072, False), (4, 3072, True), (1, 8192, False), (1, 8192, True)]
    report = {
        "gpu": torch.cuda.get_device_name(0),
        "gpu_memory": torch.cuda.get_device_properties(0).total_memory,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "attention": "sdpa",
        "dtype": "bfloat16",
        "shapes": {},
        "throughput": {},
    }
    for name in args.shapes.split(","):
        t0 = time.time()
        report["shapes"][name] = probe_shape(name, SHAPES[name], settings)
        report["throughput"][name] = throughput(SHAPES[name], 4, 3072)
        print(f"{name}: {time.time() - t0:.0f} s", flush=True)
        print(
            json.dumps(
                {"memory": report["shapes"][name]["settings"], "throughput": report["throughput"][name]}, indent=1
            ),
            flush=True,
        )
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

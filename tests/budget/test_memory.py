"""The memory model (codegrpo.budget.memory) against the published figures it cites and a GPU's measurement
(docs/measurements), and the evaluation engine's KV cache by hand."""

import dataclasses
import json

import pytest

from codegrpo import budget

from tests.budget.conftest import paper_with as _cfg
from tests.conftest import REPO_ROOT as ROOT


def test_state_memory_is_zeros_16_bytes_per_parameter():
    """ZeRO (Rajbhandari et al. 2020) §3.1: mixed-precision Adam needs 16Ψ bytes, e.g. 24 GB for the 1.5B GPT-2;
    Fig. 1: a 7.5B model with P_os+g+p over N_d = 64 GPUs holds 1.9 GB of model states per GPU."""
    assert budget.MEMORY.state_bytes_per_param == 16
    assert budget.state_bytes(1.5e9, 1) / budget.GB == pytest.approx(24.0)
    assert budget.state_bytes(7.5e9, 64) / budget.GB == pytest.approx(1.875)
    assert budget.state_bytes(1e9, 1, param_offload=True, optimizer_offload=True) / budget.GB == pytest.approx(4.0)


def test_activation_memory_has_korthikantis_form():
    """Korthikanti et al. 2022, Eq. (1): c s b h bytes per layer (c = 34 for a GPT layer with flash attention, no
    score matrix); full recomputation keeps 2 s b h per layer (§4) plus one layer's full activations."""
    spec = budget.KNOWN_MODELS["LLM4Binary/llm4decompile-6.7b-v2"]
    s, b, h, L = 3072, 4, 4096, 32
    gpt = dataclasses.replace(budget.MEMORY, act_sbh_per_layer=34.0)
    assert budget.activation_bytes(spec, s * b, recompute=False, mem=gpt) == L * 34 * s * b * h
    assert budget.activation_bytes(spec, s * b, recompute=True, mem=gpt) == L * 2 * s * b * h + 34 * s * b * h


MEASURED = json.loads((ROOT / "docs" / "measurements" / "gpu_memory_probe_h200.json").read_text())


@pytest.mark.parametrize(
    "shape,hub_id", [("llama-6.7b", "LLM4Binary/llm4decompile-6.7b-v2"), ("qwen3-8b", "Qwen/Qwen3-8B")]
)
def test_memory_model_covers_what_a_gpu_measured(shape, hub_id):
    """The model's constants against benchmarks/gpu_memory_probe.py on one H200 (bf16, SDPA): per-layer
    activations at or above the measured ones (with and without recomputation), logits at or above the measured
    head, the activation estimate of the paper's micro-batch within 20 % above the measurement, and the training
    MFU no more optimistic than one GPU without communication reached."""
    spec = budget.KNOWN_MODELS[hub_id]
    m = MEASURED["shapes"][shape]
    assert m["shape"]["hidden_size"] == spec.hidden and m["shape"]["vocab_size"] == spec.vocab
    for row in m["settings"]:
        tokens = row["micro_batch"] * row["seq"]
        per_layer = budget.MEMORY.act_sbh_per_layer_recompute if row["grad_ckpt"] else budget.MEMORY.act_sbh_per_layer
        assert per_layer * spec.hidden * tokens >= row["per_layer_saved"]
        assert budget.MEMORY.logits_bytes_per_element * spec.vocab * tokens >= row["head_saved"]
        if not row["grad_ckpt"] and row["seq"] == 3072 and row["micro_batch"] == 4:
            est = budget.activation_bytes(spec, tokens, recompute=False)
            assert row["per_layer_saved"] * spec.layers <= est <= 1.2 * row["per_layer_saved"] * spec.layers
    thr = MEASURED["throughput"][shape]
    assert thr["params"] == pytest.approx(spec.params, rel=0.01)
    assert budget.THROUGHPUT.train_mfu <= thr["model_tflops_6N"] / budget.GPUS["h200"][1]


def test_evaluation_engine_memory_by_hand_and_refused_when_a_sequence_does_not_fit(paper_cfg, tmp_path):
    b = budget.build_budget(_cfg(paper_cfg, tmp_path))
    e = next(e for e in b["eval_jobs"] if e["job"] == "eval_codegen dhrcl-Qwen3-8B-full-seed0")["memory"]
    # 0.85 x 80 GB engine - 2 x 8.19e9 bf16 weights - 1 GB reserve, over 2 x 36 layers x 8 KV heads x 128 x 2 bytes
    kv_per_token = 2 * 36 * 8 * 128 * 2
    assert e["kv_cache_tokens"] == int((0.85 * 80e9 - 2 * 8.19073536e9 - 1e9) / kv_per_token)
    assert e["max_model_len"] == 8192 + 2048 and e["fits"] is True
    small = budget.build_budget(_cfg(paper_cfg, tmp_path, **{"cluster.gpu_memory_gb": 24}))
    assert any(
        p.startswith("eval_codegen dhrcl-Qwen3-14B-full-seed0:") and "evaluate.vllm.gpu_memory_utilization" in p
        for p in small["problems"]
    )

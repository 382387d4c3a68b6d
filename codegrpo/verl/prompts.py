"""The prompt format of SK²Decompile's SFT and RL stages under verl 0.4.1 (config key ``model.chat_template``).

verl 0.4.1 always renders a training prompt with the tokenizer's chat template: the SFT dataset
(``verl.utils.dataset.sft_dataset.SFTDataset``) wraps the prompt as one user turn with
``add_generation_prompt=True``, the RL dataset (``RLHFDataset``) does the same to its ``prompt`` messages. Both
take the tokenizer from ``verl.utils.hf_tokenizer`` in the process that builds the datasets (the SFT trainer's
processes, the PPO TaskRunner); ``actor_rollout_ref.model.custom_chat_template`` reaches only the workers'
tokenizers, not those datasets. The choice:

* ``passthrough``: a template that emits each message's content and nothing else, installed on the tokenizer
  that builds the datasets (:func:`install`), so the model trains on exactly the prompt text -- the format the
  reference's inference sends (raw prompt string, no chat template);
* ``tokenizer``: the checkpoint's own template;
* null: ``tokenizer`` when the starting model has a template, else an error naming the key (:func:`resolve`).

Evaluation follows the same choice (``evaluate.decompile.use_chat_template`` null: :func:`eval_uses_template`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

KEY = "model.chat_template"
CHOICES = ("tokenizer", "passthrough")
PASSTHROUGH_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
SK2D_STAGES = ("sft", "skeleton_rl", "skin_rl")


class ChatTemplateError(ValueError):
    """No usable prompt format: the message names the config key."""


def model_has_template(model_dir: str | os.PathLike) -> bool | None:
    """Whether the tokenizer of a local model folder has a chat template (None: not a local folder)."""
    path = Path(model_dir)
    if not path.is_dir():
        return None
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return True
    cfg = path / "tokenizer_config.json"
    if not cfg.is_file():
        return False
    try:
        return bool(json.loads(cfg.read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError):
        return False


def resolve(choice: str | None, has_template: bool | None, where: str = "") -> str:
    """The effective choice for a run starting from a model with (``has_template``) or without a template."""
    if choice is not None and choice not in CHOICES:
        raise ChatTemplateError(f"{KEY}: {choice!r} is not one of {CHOICES} (or null)")
    if choice == "tokenizer" and has_template is False:
        raise ChatTemplateError(
            f"{KEY} is 'tokenizer' but the tokenizer of {where or 'the base model'} has no chat "
            f"template; set {KEY}: passthrough (the prompt as is)"
        )
    if choice is None:
        if has_template is False:
            raise ChatTemplateError(
                f"{KEY} is not set and the tokenizer of {where or 'the base model'} has no chat template, which "
                f"verl 0.4.1 applies to every SFT/RL prompt; set {KEY}: passthrough (train on the prompt as is, as "
                f"the reference's inference sends it) or tokenizer"
            )
        return "tokenizer"
    return choice


def eval_uses_template(cfg: dict) -> bool:
    """``evaluate.decompile.use_chat_template``, or when null the training choice: raw prompts after
    ``passthrough`` training, the tokenizer's template otherwise (a checkpoint without one gets the raw prompt)."""
    given = ((cfg.get("evaluate") or {}).get("decompile") or {}).get("use_chat_template")
    if given is not None:
        return bool(given)
    return (cfg.get("model") or {}).get("chat_template") != "passthrough"


def render(tokenizer, prompt: str, choice: str) -> str:
    """The text verl's datasets build from ``prompt`` under ``choice`` (one user turn, generation prompt added)."""
    template = PASSTHROUGH_TEMPLATE if choice == "passthrough" else None
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], chat_template=template, add_generation_prompt=True, tokenize=False
    )


def install(choice: str | None) -> None:
    """In this process, make ``verl.utils.hf_tokenizer`` return tokenizers with the pass-through template when
    ``choice`` is ``passthrough`` (verl's SFT trainer and PPO TaskRunner import it at call time); else nothing."""
    if choice != "passthrough":
        return
    import verl.utils as vu

    original = getattr(vu.hf_tokenizer, "_codegrpo_original", vu.hf_tokenizer)

    def hf_tokenizer(*args, **kwargs):
        tok = original(*args, **kwargs)
        tok.chat_template = PASSTHROUGH_TEMPLATE
        return tok

    hf_tokenizer._codegrpo_original = original
    vu.hf_tokenizer = hf_tokenizer

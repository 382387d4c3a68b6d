"""Model factory and checkpoint plumbing shared by the training and evaluation stages.

* :func:`build_tiny_model` makes a random-init Qwen2/Qwen3 causal LM (hidden 64, 2 layers) and a byte-level
  BPE tokenizer trained on the given texts, with the chat special tokens and a chat template. Everything is
  built offline and saved with ``save_pretrained``, so verl, vLLM-free CPU runs and the evaluation stage load
  it like any Hugging Face checkpoint.
* :func:`export_hf` turns a training checkpoint into a plain Hugging Face folder (safetensors + tokenizer):
  either a folder that is already in Hugging Face layout (what the SFT trainer writes) or a sharded FSDP
  actor checkpoint written by the RL trainer (merged by the ``merge_sharded`` function the trainer adapter
  passes: :func:`codegrpo.verl.checkpoints.export_hf`).
* :func:`import_checkpoint` installs an existing checkpoint (a local folder or a hub model id) in place of
  training.

Every output folder is written beside its destination and renamed into place only when complete.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PAD_TOKEN, BOS_TOKEN, EOS_TOKEN = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# ChatML, the format of the Qwen family: what verl's RL dataset and SFT dataset apply to the prompts.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ARCHS = ("qwen2", "qwen3")

# Building or loading a model runs under process-global patches: accelerate's ``init_empty_weights`` (used by
# ``from_pretrained`` and by verl's model merger) swaps ``nn.Module.register_parameter`` and restores the value it
# saved on entry; transformers' ``no_init_weights`` swaps the ``torch.nn.init`` functions. Two threads of one
# process inside those blocks at once can leave the patch behind for good: every later model of the process then
# lands on the meta device. Every in-process model construction in the project holds this lock.
_MODEL_INIT_LOCK = threading.RLock()


class ModelInitError(RuntimeError):
    """The process's torch module construction is patched (a model was built elsewhere without the lock)."""


def check_torch_init_intact() -> None:
    """Raise :class:`ModelInitError` when ``nn.Module``'s parameter/buffer registration is not torch's own."""
    import torch

    for name in ("register_parameter", "register_buffer"):
        fn = getattr(torch.nn.Module, name)
        if getattr(fn, "__qualname__", "") != f"Module.{name}":
            raise ModelInitError(
                f"torch.nn.Module.{name} is replaced by {getattr(fn, '__module__', '?')}."
                f"{getattr(fn, '__qualname__', fn)!r} after a model was built: a model construction ran without "
                "codegrpo.models.model_init() in another thread; later models of this process would land on the "
                "meta device"
            )


@contextlib.contextmanager
def model_init() -> Iterator[None]:
    """Hold while building, loading or merging a model in this process (one at a time, see above); checks on
    the way in and out that no patch was left behind."""
    with _MODEL_INIT_LOCK:
        check_torch_init_intact()
        yield
        check_torch_init_intact()


class CheckpointError(RuntimeError):
    """A checkpoint folder is missing, incomplete or of an unknown layout (the message names the path)."""


@contextlib.contextmanager
def atomic_dir(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``dest``; it replaces ``dest`` only if the block completes."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    tmp.chmod(0o755)
    try:
        yield tmp
        if dest.exists() or dest.is_symlink():
            old = dest.with_name(f".{dest.name}.old.{os.getpid()}")
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024):
    """A byte-level BPE tokenizer (GPT-2/Qwen style) trained on ``texts``, as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("train_tokenizer: no texts to train on")
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=1 << 20,
        clean_up_tokenization_spaces=False,
    )


def tiny_config(arch: str, tokenizer, hidden_size: int = 64, num_layers: int = 2, max_position_embeddings: int = 4096):
    """The transformers config of the tiny model (Qwen2 or Qwen3 layout)."""
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    if arch == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common)
    if arch == "qwen3":
        from transformers import Qwen3Config

        return Qwen3Config(head_dim=hidden_size // 4, **common)
    raise ValueError(f"unknown tiny model arch {arch!r}; expected one of {ARCHS}")


def build_tiny_model(
    out_dir: str | os.PathLike,
    texts: Sequence[str],
    arch: str = "qwen2",
    vocab_size: int = 1024,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    max_position_embeddings: int = 4096,
) -> Path:
    """Build a random-init tiny causal LM plus a tokenizer trained on ``texts``, saved to ``out_dir``.

    Fully offline. The folder holds ``config.json``, ``model.safetensors``, ``generation_config.json``, the
    tokenizer files (with the chat template) and ``tiny_model.json`` (how it was built).
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    t0 = time.time()
    texts = list(texts)
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size)
    cfg = tiny_config(arch, tokenizer, hidden_size, num_layers, max_position_embeddings)
    torch.manual_seed(seed)
    with model_init():
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    n_params = sum(p.numel() for p in model.parameters())
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        with open(tmp / "tiny_model.json", "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "arch": arch,
                    "vocab_size": len(tokenizer),
                    "requested_vocab_size": vocab_size,
                    "seed": seed,
                    "hidden_size": hidden_size,
                    "num_layers": num_layers,
                    "n_params": n_params,
                    "n_texts": len(texts),
                },
                fh,
                indent=2,
            )
    log.info(
        "tiny %s model: %d params, vocab %d, %d training texts, %.1fs -> %s",
        arch,
        n_params,
        len(tokenizer),
        len(texts),
        time.time() - t0,
        out_dir,
    )
    return Path(out_dir)


def build_tiny_reward_model(
    out_dir: str | os.PathLike,
    texts: Sequence[str],
    vocab_size: int = 1024,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    value_head_prefix: str = "v_head.summary",
) -> Path:
    """A tiny reward model in AceCodeRM's layout (:mod:`codegrpo.rewards.reward_model`): the tiny Qwen2 causal
    LM of :func:`build_tiny_model` plus a scalar value head ``<value_head_prefix>.weight`` (1, hidden) and
    ``.bias`` (1,) in the same ``model.safetensors``. Fully offline; random weights (seeded)."""
    import torch
    from safetensors.torch import load_file, save_file

    build_tiny_model(
        out_dir, texts, arch="qwen2", vocab_size=vocab_size, seed=seed, hidden_size=hidden_size, num_layers=num_layers
    )
    weights = Path(out_dir) / "model.safetensors"
    tensors = load_file(str(weights))
    gen = torch.Generator().manual_seed(seed + 1)
    tensors[f"{value_head_prefix}.weight"] = torch.randn((1, hidden_size), generator=gen) / hidden_size**0.5
    tensors[f"{value_head_prefix}.bias"] = torch.randn((1,), generator=gen)
    tmp = weights.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, weights)
    meta = json.loads((Path(out_dir) / "tiny_model.json").read_text())
    (Path(out_dir) / "tiny_model.json").write_text(json.dumps({**meta, "value_head": value_head_prefix}, indent=2))
    return Path(out_dir)


def load_model(path: str | os.PathLike, device: str = "cpu"):
    """(model, tokenizer) from a Hugging Face folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    with model_init():
        model = AutoModelForCausalLM.from_pretrained(str(path)).to(device)
    return model, tok


# ----------------------------------------------------------------------------------------------------------
# checkpoints

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def is_hf_dir(path: str | os.PathLike) -> bool:
    """True for a folder in Hugging Face layout: config.json plus weights."""
    p = Path(path)
    return (p / "config.json").is_file() and any((p / w).is_file() for w in WEIGHT_FILES)


def is_fsdp_actor_dir(path: str | os.PathLike) -> bool:
    """True for a sharded FSDP checkpoint folder (model shards + huggingface/ config and tokenizer)."""
    p = Path(path)
    return any(p.glob("model_world_size_*_rank_*.pt")) and (p / "huggingface" / "config.json").is_file()


def has_tokenizer(p: Path) -> bool:
    return (p / "tokenizer.json").is_file() or (p / "tokenizer_config.json").is_file()


def export_hf(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    tokenizer_from: str | os.PathLike | None = None,
    merge_sharded: Callable[[Path, Path], None] | None = None,
) -> Path:
    """Write ``src`` (an HF-layout training checkpoint or a sharded FSDP actor checkpoint) to ``dst`` as a
    Hugging Face folder with safetensors weights and the tokenizer.

    ``tokenizer_from`` supplies the tokenizer when ``src`` has none (some trainers save only the weights).
    ``merge_sharded(src, target)`` merges a sharded actor checkpoint; only the trainer adapter knows how, so a
    sharded ``src`` needs it (:func:`codegrpo.verl.checkpoints.export_hf` passes it).
    """
    src = Path(src)
    if not src.is_dir():
        raise CheckpointError(f"{src}: checkpoint folder does not exist")
    if is_fsdp_actor_dir(src) and merge_sharded is None:
        raise CheckpointError(
            f"{src}: a sharded FSDP actor checkpoint; export it with the trainer adapter's "
            "export_hf (codegrpo.verl.checkpoints), which merges the shards"
        )
    with atomic_dir(dst) as tmp:
        if is_fsdp_actor_dir(src):
            with model_init():
                merge_sharded(src, tmp)
        elif is_hf_dir(src) and any(src.glob("*.safetensors")) and not any(src.glob("pytorch_model*.bin")):
            # already safetensors (what verl's SFT trainer writes): copy the files, no reload of a large model
            for item in src.iterdir():
                if item.is_file() and (item.suffix in (".safetensors", ".json", ".jinja", ".txt", ".model")):
                    shutil.copy2(item, tmp / item.name)
        elif is_hf_dir(src):
            from transformers import AutoModelForCausalLM

            with model_init():
                model = AutoModelForCausalLM.from_pretrained(str(src), torch_dtype="auto")
            model.save_pretrained(tmp, safe_serialization=True)
        else:
            raise CheckpointError(
                f"{src}: neither a Hugging Face folder (config.json + weights) nor an FSDP actor checkpoint "
                "(model_world_size_*_rank_*.pt + huggingface/)"
            )
        if not has_tokenizer(tmp):
            from transformers import AutoTokenizer

            tok_src = src if has_tokenizer(src) else (Path(tokenizer_from) if tokenizer_from else None)
            if tok_src is None:
                raise CheckpointError(f"{src}: no tokenizer in the checkpoint and no tokenizer_from given")
            AutoTokenizer.from_pretrained(str(tok_src)).save_pretrained(tmp)
        if not is_hf_dir(tmp):
            raise CheckpointError(f"export of {src} produced no weights")
    log.info("exported %s -> %s", src, dst)
    return Path(dst)


def import_checkpoint(src: str, dst: str | os.PathLike, revision: str | None = None) -> Path:
    """Install an existing checkpoint at ``dst`` instead of training it.

    ``src`` is a local Hugging Face folder (copied, weights re-saved only if they are not safetensors) or a
    hub model id such as ``LLM4Binary/sk2decompile-struct-6.7b`` (through the Hugging Face cache: downloaded
    with huggingface_hub, or taken from the cache offline after ``snakemake prefetch``; fails with a clear
    message when neither is possible).
    """
    p = Path(os.path.expanduser(src))
    if p.exists():
        if not is_hf_dir(p):
            raise CheckpointError(f"{p}: not a Hugging Face model folder (needs config.json and weights)")
        with atomic_dir(dst) as tmp:
            for item in p.iterdir():
                if item.is_file():
                    shutil.copy2(item, tmp / item.name)
                elif item.is_dir() and item.name != ".cache":
                    shutil.copytree(item, tmp / item.name)
        log.info("imported local checkpoint %s -> %s", p, dst)
        return Path(dst)
    if "/" not in src or src.startswith((".", "/", "~")):
        raise CheckpointError(f"{src}: no such folder, and not a hub model id of the form owner/name")
    from huggingface_hub import snapshot_download

    with atomic_dir(dst) as tmp:
        # Through the Hugging Face cache (HF_HOME): a job with HF_HUB_OFFLINE=1 finds what `snakemake prefetch`
        # put there (a local_dir download cannot fall back on the cache offline).
        try:
            cached = Path(
                snapshot_download(
                    repo_id=src,
                    revision=revision,
                    allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.py", "*.bin"],
                )
            )
        except Exception as exc:  # network errors, offline mode without the cache, missing repo
            raise CheckpointError(f"could not download model {src!r}: {type(exc).__name__}: {exc}") from exc
        for item in cached.rglob("*"):
            if item.is_file():  # the cache's files are symlinks to blobs: copy the content
                (tmp / item.relative_to(cached)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(item, tmp / item.relative_to(cached))
        if not is_hf_dir(tmp):
            raise CheckpointError(f"model {src!r} downloaded without config.json/weights")
    log.info("imported hub model %s -> %s", src, dst)
    return Path(dst)


def corpus_from_parquet(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Every prompt and response text of SFT parquet files (prompt/response columns) and verl RL parquet files
    (chat-message prompt, ``reward_model.ground_truth``): the tokenizer corpus of the tiny model."""
    import pandas as pd

    texts: list[str] = []
    for path in paths:
        df = pd.read_parquet(path)
        if "response" in df.columns:  # SFT
            for col in ("prompt", "response"):
                texts += [str(x) for x in df[col] if isinstance(x, str)]
        elif "reward_model" in df.columns:  # verl RL
            for msgs in df["prompt"]:
                texts += [str(m["content"]) for m in msgs]
            texts += [str(rm.get("ground_truth", "")) for rm in df["reward_model"]]
        else:
            raise ValueError(
                f"{path}: neither SFT (prompt, response) nor verl RL (prompt, reward_model) columns; "
                f"found {list(df.columns)}"
            )
    return [t for t in texts if t]

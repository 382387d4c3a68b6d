"""Text generation back-ends for evaluation: vLLM on a GPU, transformers on CPU.

Both take raw prompt strings and return completions (the prompt is not repeated). Greedy decoding is the
default (SK²Decompile's protocol: temperature 0); sampling with ``n`` completions per prompt serves pass@k.
vLLM is imported only when it is used: it is not installed on CPU machines.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)


@dataclass
class GenerationSettings:
    max_new_tokens: int = 512
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    n: int = 1  # completions per prompt
    batch_size: int = 8
    max_prompt_tokens: int = 2048
    use_chat_template: bool = False  # wrap the prompt as one user message with the tokenizer's template
    seed: int = 0


def _check_model_dir(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a Hugging Face model folder (no config.json)")
    return path


def apply_template(tokenizer, prompt: str, use_chat_template: bool) -> str:
    """The text fed to the model: the raw prompt, or the prompt as one chat turn when asked and available."""
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
    return prompt


class HFGenerator:
    """Batched generation with transformers (CPU or a single GPU)."""

    backend = "transformers"

    def __init__(self, model_dir: str | Path, settings: GenerationSettings, device: str = "cpu"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = _check_model_dir(model_dir)
        self.settings = settings
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.tokenizer.padding_side = "left"
        # an over-long prompt loses its beginning, not the generation cue at its end
        self.tokenizer.truncation_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, torch_dtype=dtype).to(device)
        self.model.eval()
        self._torch = torch

    def generate(self, prompts: Sequence[str], desc: str = "generate") -> list[list[str]]:
        """Return, for each prompt, a list of ``settings.n`` completions."""
        from tqdm import tqdm

        s = self.settings
        torch = self._torch
        torch.manual_seed(s.seed)
        texts = [apply_template(self.tokenizer, p, s.use_chat_template) for p in prompts]
        too_long = sum(len(ids) > s.max_prompt_tokens for ids in self.tokenizer(texts)["input_ids"]) if texts else 0
        if too_long:
            log.warning("%s: %d of %d prompts exceed %d tokens and lose their beginning", desc, too_long, len(texts),
                        s.max_prompt_tokens)
        out: list[list[str]] = []
        t0 = time.time()
        greedy = s.temperature <= 0
        for start in tqdm(range(0, len(texts), s.batch_size), desc=desc, unit="batch"):
            batch = texts[start : start + s.batch_size]
            enc = self.tokenizer(
                batch,
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=s.max_prompt_tokens,
                return_token_type_ids=False,
            ).to(self.device)
            kwargs = dict(
                max_new_tokens=s.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
                num_return_sequences=s.n,
            )
            if greedy:
                kwargs.update(do_sample=False)
                if s.n > 1:
                    raise ValueError("greedy decoding with n > 1 gives identical samples; set a temperature")
            else:
                kwargs.update(do_sample=True, temperature=s.temperature, top_p=s.top_p)
            with torch.no_grad():
                gen = self.model.generate(**enc, **kwargs)
            new = gen[:, enc["input_ids"].shape[1] :]
            decoded = self.tokenizer.batch_decode(new, skip_special_tokens=True)
            for i in range(len(batch)):
                out.append(decoded[i * s.n : (i + 1) * s.n])
        log.info("%s: %d prompts x %d samples in %.1f s (transformers, %s)", desc, len(texts), s.n, time.time() - t0, self.device)
        return out


class VLLMGenerator:
    """Generation with vLLM (GPU). Raw prompts, ``stop`` at the tokenizer's EOS, like the reference."""

    backend = "vllm"

    def __init__(self, model_dir: str | Path, settings: GenerationSettings, gpu_memory_utilization: float = 0.8,
                 max_model_len: int = 32768, tensor_parallel_size: int = 1):
        try:
            from vllm import LLM  # noqa: PLC0415 - optional GPU dependency
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise RuntimeError("backend 'vllm' needs the vllm package (pip install codegrpo[gpu])") from exc
        self.model_dir = _check_model_dir(model_dir)
        self.settings = settings
        self.llm = LLM(
            model=str(self.model_dir),
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            seed=settings.seed,
        )
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, prompts: Sequence[str], desc: str = "generate") -> list[list[str]]:  # pragma: no cover - GPU
        from vllm import SamplingParams

        s = self.settings
        params = SamplingParams(
            n=s.n,
            temperature=max(s.temperature, 0.0),
            top_p=s.top_p if s.temperature > 0 else 1.0,
            max_tokens=s.max_new_tokens,
            stop=[self.tokenizer.eos_token] if self.tokenizer.eos_token else None,
            seed=s.seed,
        )
        texts = [apply_template(self.tokenizer, p, s.use_chat_template) for p in prompts]
        t0 = time.time()
        results = self.llm.generate(texts, params, use_tqdm=True)
        log.info("%s: %d prompts x %d samples in %.1f s (vllm)", desc, len(texts), s.n, time.time() - t0)
        return [[o.text for o in r.outputs] for r in results]


def vllm_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return False


def make_generator(model_dir: str | Path, settings: GenerationSettings, backend: str = "auto"):
    """``auto``: vLLM when a GPU and vllm are present, else transformers (GPU if present, else CPU)."""
    if backend not in ("auto", "vllm", "transformers"):
        raise ValueError(f"unknown generation backend {backend!r} (auto, vllm, transformers)")
    if backend == "vllm" or (backend == "auto" and cuda_available() and vllm_available()):
        return VLLMGenerator(model_dir, settings)
    return HFGenerator(model_dir, settings, device="cuda" if cuda_available() else "cpu")

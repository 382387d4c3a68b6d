"""Text generation back-ends for evaluation: vLLM on a GPU, transformers on CPU.

Both take raw prompt strings and return completions (the prompt is not repeated). Greedy decoding is the
default (SK²Decompile's protocol: temperature 0); sampling with ``n`` completions per prompt serves pass@k.
vLLM is imported only when it is used: it is not installed on CPU machines.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field
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
    chat_template_kwargs: dict = field(default_factory=dict)  # e.g. {"enable_thinking": False}
    seed: int = 0
    # transformers backend: the weights' dtype ("float32", "bfloat16"); None: float32 on CPU, bfloat16 on a GPU
    dtype: str | None = None
    # vLLM engine (config: evaluate.vllm)
    gpu_memory_utilization: float = 0.85
    max_model_len: int | None = None  # None: max_prompt_tokens + max_new_tokens
    tensor_parallel_size: int = 1

    @classmethod
    def from_params(cls, p, **fixed) -> "GenerationSettings":
        """From an evaluation rule's params (``max_new_tokens``, ``batch_size``, ``max_prompt_tokens``,
        ``use_chat_template``, ``seed``, ``vllm`` and, unless ``fixed`` sets them, ``temperature``, ``top_p``,
        ``n_samples``)."""
        sampling = {"temperature": p.temperature, "top_p": p.top_p, "n": p.n_samples} if not fixed else {}
        return cls(
            max_new_tokens=p.max_new_tokens,
            batch_size=p.batch_size,
            max_prompt_tokens=p.max_prompt_tokens,
            use_chat_template=p.use_chat_template,
            seed=p.seed,
            chat_template_kwargs=dict(getattr(p, "chat_template_kwargs", None) or {}),
            gpu_memory_utilization=p.vllm["gpu_memory_utilization"],
            max_model_len=p.vllm["max_model_len"],
            tensor_parallel_size=p.vllm["tensor_parallel_size"],
            **{**sampling, **fixed},
        )


def _warn_too_long(desc: str, prompt_ids: list, max_prompt_tokens: int) -> None:
    """Warn how many of the tokenized prompts the engine will cut (from the left) to ``max_prompt_tokens``."""
    too_long = sum(len(ids) > max_prompt_tokens for ids in prompt_ids)
    if too_long:
        log.warning(
            "%s: %d of %d prompts exceed %d tokens and lose their beginning",
            desc,
            too_long,
            len(prompt_ids),
            max_prompt_tokens,
        )


def _check_model_dir(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a Hugging Face model folder (no config.json)")
    return path


def apply_template(tokenizer, prompt: str, use_chat_template: bool, template_kwargs: dict | None = None) -> str:
    """The text fed to the model: the raw prompt, or the prompt as one chat turn when asked and available
    (``template_kwargs``, e.g. Qwen3's ``enable_thinking``, passed to the template as in training)."""
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True, **(template_kwargs or {})
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
        if settings.dtype:
            dtype = getattr(torch, settings.dtype, None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"generation dtype {settings.dtype!r} is not a torch dtype (float32, bfloat16, ...)")
        from codegrpo.models import model_init

        with model_init():
            self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, torch_dtype=dtype).to(device)
        self.model.eval()
        self._torch = torch

    def generate(self, prompts: Sequence[str], desc: str = "generate") -> list[list[str]]:
        """Return, for each prompt, a list of ``settings.n`` completions."""
        from tqdm import tqdm

        s = self.settings
        torch = self._torch
        torch.manual_seed(s.seed)
        texts = [apply_template(self.tokenizer, p, s.use_chat_template, s.chat_template_kwargs) for p in prompts]
        if texts:
            _warn_too_long(desc, self.tokenizer(texts)["input_ids"], s.max_prompt_tokens)
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
        log.info(
            "%s: %d prompts x %d samples in %.1f s (transformers, %s, %s)",
            desc,
            len(texts),
            s.n,
            time.time() - t0,
            self.device,
            self.model.dtype,
        )
        return out

    def close(self) -> None:
        """Drop the model and return its memory (GPU cache included)."""
        if getattr(self, "model", None) is None:
            return
        self.model = None
        gc.collect()
        if self.device != "cpu":
            self._torch.cuda.empty_cache()


class VLLMGenerator:
    """Generation with vLLM (GPU). Raw prompts, ``stop`` at the tokenizer's EOS, like the reference.

    Engine sizes come from the settings (config ``evaluate.vllm``). Prompts are tokenized and cut to
    ``max_prompt_tokens`` from the left exactly as the transformers backend does, and passed as token ids (vLLM
    itself rejects a prompt longer than ``max_model_len``). ``close()`` shuts the engine down and frees its GPU
    memory; build the next engine only after that (one engine per GPU at a time).
    """

    backend = "vllm"

    def __init__(self, model_dir: str | Path, settings: GenerationSettings):
        try:
            from vllm import LLM  # noqa: PLC0415 - optional GPU dependency
        except ImportError as exc:
            raise RuntimeError(
                "backend 'vllm' needs the vllm package: run in the training environment "
                "(envs/train.yaml, docs/environments.md)"
            ) from exc
        self.model_dir = _check_model_dir(model_dir)
        self.settings = settings
        s = settings
        max_model_len = s.max_model_len or (s.max_prompt_tokens + s.max_new_tokens)
        if s.max_prompt_tokens + s.max_new_tokens > max_model_len:
            raise ValueError(
                f"evaluate.vllm.max_model_len={max_model_len} is below evaluate.max_prompt_tokens "
                f"({s.max_prompt_tokens}) + max_new_tokens ({s.max_new_tokens})"
            )
        self.engine_args = dict(
            model=str(self.model_dir),
            gpu_memory_utilization=s.gpu_memory_utilization,
            max_model_len=max_model_len,
            tensor_parallel_size=s.tensor_parallel_size,
            seed=s.seed,
        )
        self.llm = LLM(**self.engine_args)
        self.tokenizer = self.llm.get_tokenizer()

    def prompt_token_ids(self, prompts: Sequence[str], desc: str = "generate") -> list[list[int]]:
        s = self.settings
        texts = [apply_template(self.tokenizer, p, s.use_chat_template, s.chat_template_kwargs) for p in prompts]
        if not texts:
            return []
        _warn_too_long(desc, self.tokenizer(texts)["input_ids"], s.max_prompt_tokens)
        # the transformers backend's cut: the tokenizer truncates from the left, special tokens kept
        self.tokenizer.truncation_side = "left"
        return [list(x) for x in self.tokenizer(texts, truncation=True, max_length=s.max_prompt_tokens)["input_ids"]]

    def generate(self, prompts: Sequence[str], desc: str = "generate") -> list[list[str]]:
        from vllm import SamplingParams

        if self.llm is None:
            raise RuntimeError(f"{self.model_dir}: the vLLM engine was closed")
        s = self.settings
        params = SamplingParams(
            n=s.n,
            temperature=max(s.temperature, 0.0),
            top_p=s.top_p if s.temperature > 0 else 1.0,
            max_tokens=s.max_new_tokens,
            stop=[self.tokenizer.eos_token] if self.tokenizer.eos_token else None,
            seed=s.seed,
        )
        ids = self.prompt_token_ids(prompts, desc)
        t0 = time.time()
        results = self.llm.generate([{"prompt_token_ids": x} for x in ids], params, use_tqdm=True)
        log.info("%s: %d prompts x %d samples in %.1f s (vllm)", desc, len(ids), s.n, time.time() - t0)
        return [[o.text for o in r.outputs] for r in results]

    def close(self) -> None:
        """Shut the engine down and release its GPU memory (vLLM 0.8.5: drop the engine, tear down the
        model-parallel groups, collect, empty the CUDA cache)."""
        if getattr(self, "llm", None) is None:
            return
        self.llm = None
        try:
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

            destroy_model_parallel()
            destroy_distributed_environment()
        except ImportError:  # pragma: no cover - layout of another vLLM version
            log.warning("vllm.distributed.parallel_state not found: engine dropped without tearing down its groups")
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass
        log.info("%s: vLLM engine closed", self.model_dir)


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

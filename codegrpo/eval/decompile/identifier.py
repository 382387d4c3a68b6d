"""Identifier quality: BringUpBench outputs and the identifier reward as a metric (codegrpo.eval.decompile)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Mapping, Sequence

from codegrpo.contracts import SK2D_IDENTIFIER
from codegrpo.io import iter_jsonl
from codegrpo.eval.decompile.data import EvalDataError

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------------
# Identifier quality (BringUpBench outputs and our own outputs)


def load_bringupbench(path: str | os.PathLike, limit: int | None = None) -> list[dict]:
    """Read the BringUpBench inference file; ``source`` is a dict (or its Python repr) with ``content``."""
    import ast

    path = Path(path)
    rows = []
    for lineno, row in iter_jsonl(path, EvalDataError):
        src = row.get("source")
        if isinstance(src, str):
            try:
                src = ast.literal_eval(src)
            except (ValueError, SyntaxError) as exc:
                raise EvalDataError(f"{path}: line {lineno}: field 'source' is not a dict literal") from exc
        if not isinstance(src, dict) or not isinstance(src.get("content"), str):
            raise EvalDataError(f"{path}: line {lineno}: field 'source' must be a dict with a string 'content'")
        row["source"] = src
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    return rows


def metric_embedding_config(cfg: Mapping) -> dict:
    """The embedding settings of the identifier metric for a pipeline config: the top-level ``embedding``
    section (the model the identifier reward trains with: Qwen3-Embedding served through the OpenAI-compatible
    endpoint in the paper config, the packaged MiniLM in process locally), overridden key by key by
    ``evaluate.decompile.embedding``. Unknown override keys are an error naming the config path.
    """
    from codegrpo.rewards.embedding import overridden_embedding

    override = ((cfg.get("evaluate") or {}).get("decompile") or {}).get("embedding")
    return overridden_embedding(cfg, override, "evaluate.decompile.embedding", ValueError)


@contextlib.contextmanager
def metric_embedding(section: Mapping | None, log_path: str | os.PathLike | None = None):
    """Yield ``(overrides, description)`` for :func:`identifier_scores` from an ``embedding`` config section.

    With ``serve: true`` the section's embedding server (:func:`codegrpo.services.embedding_service`: vLLM's
    OpenAI server on GPU nodes, the project's server on CPU) runs on 127.0.0.1 while the block runs, and the
    overrides point the metric at it. ``description`` names the backend, the model and the endpoint actually
    used (recorded in the result file).
    """
    from codegrpo.rewards.embedding import FIELD_TYPES, settings_from_env

    section = dict(section or {})
    overrides = {k: v for k, v in section.items() if k in FIELD_TYPES and v not in (None, "")}
    with contextlib.ExitStack() as stack:
        if section.get("serve"):
            from codegrpo.services import embedding_service

            svc = stack.enter_context(embedding_service(section, log_path=log_path))
            overrides.update(
                backend="openai",
                api_base=svc.env["CODEGRPO_EMBEDDING_API_BASE"],
                model=svc.env["CODEGRPO_EMBEDDING_MODEL"],
            )
            log.info(
                "identifier metric: embedding server ready at %s (model %s)", overrides["api_base"], overrides["model"]
            )
        s = settings_from_env(overrides)
        desc = {"backend": s.backend, "variant": s.variant, "model": s.model, "served": bool(section.get("serve"))}
        if s.backend == "openai":
            desc["api_base"] = s.api_base
        else:
            desc["local_model_path"] = s.local_model_path or "packaged"
        yield overrides, desc


def identifier_scores(
    outputs: Sequence[str],
    references: Sequence[str],
    extra_infos: Sequence[dict] | None = None,
    data_source: str = SK2D_IDENTIFIER,
    embedding: Mapping | None = None,
) -> list[float]:
    """The identifier-naming reward (codegrpo.rewards registry) used as a metric.

    ``embedding`` (embedding setting overrides, see :func:`metric_embedding`) selects the embedding backend
    and model; without it the reward's own environment-configured backend is used.
    """
    from codegrpo.rewards import compute_score_batch

    n = len(outputs)
    if len(references) != n:
        raise ValueError("outputs and references differ in length")
    extra = list(extra_infos) if extra_infos is not None else [{} for _ in range(n)]
    kwargs = {"embedding": dict(embedding)} if embedding else {}
    scores = compute_score_batch([data_source] * n, list(outputs), list(references), extra, **kwargs)
    return [float(s["score"]) if isinstance(s, dict) else float(s) for s in scores]


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0

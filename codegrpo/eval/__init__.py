"""Evaluation of trained models and of the reference baselines.

``decompile``: SK²Decompile two-phase inference and re-executability on HumanEval-Decompile, identifier
quality on BringUpBench. ``codegen``: DHRCL pass@k, syntax and execution accuracy on the held-out KodCode
slice and on HumanEval. Every result file records the model, the config hash and the date so that tables
can name their source.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
from typing import Any


def config_hash(cfg: Any) -> str:
    """A short, stable hash of a (JSON-serialisable) config section."""
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def training_runs(*model_dirs) -> dict:
    """The ``done.json`` of each training run whose exported model is evaluated (``results/runs/<run>/hf``)."""
    from pathlib import Path

    out = {}
    for d in model_dirs:
        if not d:
            continue
        done = Path(d).parent / "done.json"
        if done.is_file():
            try:
                out[str(d)] = json.loads(done.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                out[str(d)] = {"unreadable": str(done)}
    return out


def provenance(model: str | None, cfg: Any, **extra: Any) -> dict:
    """The header every evaluation JSON carries: what was evaluated, with which settings, when, where."""
    return {
        "model": model,
        "config_hash": config_hash(cfg),
        "config": cfg,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        **extra,
    }

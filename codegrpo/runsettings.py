"""The one settings channel into verl's worker processes: the run's ``settings.json``.

A training run (:func:`codegrpo.verl.stages.run_grpo`) resolves its settings once into
``results/runs/<run>/settings.json`` and hands its worker processes (the TaskRunner that scores rewards, the actor
workers) only the path of that file, in ``$CODEGRPO_RUN_SETTINGS``. The reward code reads its sections from it
when it runs inside a training run:

* ``compile_reward`` — the batch gcc engine (:func:`codegrpo.rewards.compile.default_engine`);
* ``embedding`` — the identifier reward's embedder (:func:`codegrpo.rewards.embedding.get_embedder`), with the
  endpoint of an embedding server started for the run (``served.embedding``: backend, api_base, model) laid
  over it;
* ``sandbox`` — the process-wide sandbox of the DHRCL reward (:func:`codegrpo.sandbox.default_sandbox`).

File layout: ``{"fingerprint": ..., "settings": {...}, "served": {...}}``. ``settings`` is what decides resume
vs. fresh start (its fingerprint); ``served`` holds what is only known once the run's services are up (a port
chosen at run time) and is rewritten by every attempt before the trainer starts.

Outside a training run (``$CODEGRPO_RUN_SETTINGS`` unset: evaluation stages, tests, a user calling the functions)
:func:`run_section` returns ``None`` and explicit arguments are the interface. Precedence everywhere:
explicit argument > run settings > documented environment override > schema default
(:func:`schema_defaults`, read from ``schemas/config.schema.yaml``).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Mapping

SETTINGS_ENV = "CODEGRPO_RUN_SETTINGS"
SETTINGS_FILE = "settings.json"
SECTIONS = ("compile_reward", "embedding", "sandbox")
#: the documented environment overrides of the reward settings (for use outside a training run); a training
#: launch drops them from its trainer's environment, so its workers see only $CODEGRPO_RUN_SETTINGS
OVERRIDE_PREFIXES = (
    "CODEGRPO_COMPILE_",
    "CODEGRPO_EMBEDDING_",
    "CODEGRPO_SANDBOX_LIMITS",
    "CODEGRPO_SANDBOX_WORKERS",
    "CODEGRPO_DHRCL_STAGE",
)


class RunSettingsError(RuntimeError):
    """``$CODEGRPO_RUN_SETTINGS`` names a file that cannot be read or lacks a field (the message names both)."""


_CACHE: dict[str, tuple[int, dict]] = {}
_LOCK = threading.Lock()


def settings_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The settings.json of the training run this process belongs to, or None outside a training run."""
    env = os.environ if environ is None else environ
    return env.get(SETTINGS_ENV) or None


def read_document(path: str | os.PathLike) -> dict:
    """The whole settings.json at ``path`` (cached until the file changes)."""
    path = os.fspath(path)
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError as exc:
        raise RunSettingsError(
            f"{path}: cannot read the run's {SETTINGS_FILE} (named by ${SETTINGS_ENV}): {exc.strerror or exc}"
        ) from exc
    with _LOCK:
        hit = _CACHE.get(path)
        if hit is not None and hit[0] == mtime:
            return hit[1]
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise RunSettingsError(f"{path}: not a readable JSON {SETTINGS_FILE}: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("settings"), dict):
        raise RunSettingsError(f"{path}: field 'settings' is missing or not an object")
    with _LOCK:
        _CACHE[path] = (mtime, doc)
    return doc


def load(path: str | os.PathLike | None = None) -> dict:
    """The resolved settings (``settings`` of the document) from ``path`` or ``$CODEGRPO_RUN_SETTINGS``."""
    path = path or settings_path()
    if not path:
        raise RunSettingsError(f"{SETTINGS_ENV} is not set (it names the run's {SETTINGS_FILE}; set by run_grpo)")
    return read_document(path)["settings"]


def run_section(name: str, path: str | os.PathLike | None = None) -> dict | None:
    """Section ``name`` (one of :data:`SECTIONS`) of the running training run; ``None`` outside a training run.

    For ``embedding`` the endpoint of the run's embedding server (``served.embedding``) is laid over the section.
    """
    if name not in SECTIONS:
        raise ValueError(f"unknown run settings section {name!r}; expected one of {SECTIONS}")
    path = path or settings_path()
    if not path:
        return None
    doc = read_document(path)
    section = doc["settings"].get(name)
    if not isinstance(section, dict):
        raise RunSettingsError(
            f"{path}: field 'settings.{name}' is missing or not an object (a run resolves "
            f"{', '.join(SECTIONS)} into its {SETTINGS_FILE})"
        )
    out = dict(section)
    served = (doc.get("served") or {}).get(name)
    if served:
        out.update(served)
    return out


def schema_defaults(*path: str) -> dict[str, Any]:
    """The defaults of the config section at ``path`` (e.g. ``"sandbox"`` or ``"dhrcl", "reward"``) in
    ``schemas/config.schema.yaml``; keys without a default are left out."""
    from codegrpo.config import load_schema

    schema = load_schema()

    def deref(node: dict) -> dict:
        ref = node.get("$ref", "")
        if not ref.startswith("#/$defs/"):
            return node
        base = schema["$defs"][ref[len("#/$defs/") :]]
        props = dict(base.get("properties") or {})
        for k, v in (node.get("properties") or {}).items():  # per-key refinements (e.g. a stage's own default)
            props[k] = {**props.get(k, {}), **v}
        return {**base, **{k: v for k, v in node.items() if k != "$ref"}, "properties": props}

    node = schema
    for name in path:
        node = deref((node.get("properties") or {}).get(name) or {})
    props = node.get("properties") or {}
    return {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}


def write_served(path: str | os.PathLike, served: Mapping[str, Mapping[str, Any]]) -> None:
    """Record the run's service endpoints (``served``) in its settings.json, atomically; before workers start."""
    from codegrpo.io import write_json

    doc = dict(read_document(path))
    doc["served"] = {k: dict(v) for k, v in served.items()}
    write_json(path, doc)

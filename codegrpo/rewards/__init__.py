"""Reward registry: one scorer per ``data_source`` key.

A scorer is registered with :func:`register` and looked up by the ``data_source`` of a sample (the verl RL row's
``data_source`` column). Two entry points mirror verl's reward managers:

* :func:`compute_score` — one sample (the naive manager's keyword signature);
* :func:`compute_score_batch` — a whole batch (the batch manager's signature). Samples are grouped by data source
  and each scorer's batch function is called **once** with all of its samples, so scorers that need the whole
  batch (deduplicated compile checks, one embedding request, batch-relative rewards) see it.

Every result is a dict with ``"score"`` plus a fixed set of component keys per data source (verl turns every
key into a per-sample array, so all samples must carry the same keys). When one batch mixes data sources,
:func:`compute_score_batch` returns the union of their keys, a component a scorer does not produce being ``0.0``.

Scorer functions:

* ``score_fn(solution_str, ground_truth, extra_info=None, **kwargs) -> dict | float``
* ``batch_fn(solution_strs, ground_truths, extra_infos, **kwargs) -> list[dict | float]``

Either may be omitted: a missing batch function loops over ``score_fn``; a missing single function calls
``batch_fn`` with a batch of one. A plain number result becomes ``{"score": float(x)}``.

Built-in scorers (``codegrpo.rewards.sk2d`` and, when present, ``codegrpo.rewards.dhrcl``) register themselves
on the first lookup, so importing this package stays cheap (no torch, no verl).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "RewardError",
    "UnknownDataSourceError",
    "register",
    "unregister",
    "registered",
    "get_scorer",
    "compute_score",
    "compute_score_batch",
    "forward_env",
]

# Environment variables the reward reads in the process verl scores in (the TaskRunner Ray actor): the training
# stage must forward them (e.g. Ray runtime_env env_vars).
FORWARD_ENV_PREFIXES = ("CODEGRPO_EMBEDDING_", "CODEGRPO_COMPILE_", "CODEGRPO_GCC", "QWEN3_EMBEDDING_",
                        "GTE_EMBEDDING_", "OPENAI_API_KEY", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def forward_env(environ=None) -> dict[str, str]:
    """The variables of ``environ`` (default ``os.environ``) that configure the rewards."""
    import os

    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k.startswith(FORWARD_ENV_PREFIXES)}

# Modules that register built-in scorers; imported lazily on the first lookup. A module that does not exist
# (yet) is skipped; one that exists but fails to import raises.
BUILTIN_MODULES: tuple[str, ...] = ("codegrpo.rewards.sk2d", "codegrpo.rewards.dhrcl", "codegrpo.rewards.toy")


class RewardError(RuntimeError):
    """A scorer returned something the registry cannot hand to verl, or was registered inconsistently."""


class UnknownDataSourceError(KeyError):
    """No scorer is registered for a data source; the message names it and the registered keys."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


@dataclass
class Scorer:
    name: str
    score_fn: Callable[..., Any] | None
    batch_fn: Callable[..., Any] | None
    aliases: tuple[str, ...] = ()
    keys: tuple[str, ...] | None = None  # component keys (with "score"), fixed on the first result
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- result normalisation -------------------------------------------------------------------------
    def _normalise(self, data_source: str, result: Any) -> dict[str, Any]:
        if isinstance(result, dict):
            if "score" not in result:
                raise RewardError(
                    f"scorer for data_source {data_source!r} returned a dict without 'score': keys {sorted(result)}"
                )
            out = dict(result)
        elif isinstance(result, (int, float)):
            out = {"score": result}
        else:
            try:
                out = {"score": float(result)}  # numpy scalars, 0-d tensors
            except (TypeError, ValueError) as exc:
                raise RewardError(
                    f"scorer for data_source {data_source!r} returned {type(result).__name__}, "
                    "expected a number or a dict with 'score'"
                ) from exc
        out["score"] = float(out["score"])
        keys = tuple(out)
        with self._lock:
            if self.keys is None:
                self.keys = keys
            elif set(keys) != set(self.keys):
                raise RewardError(
                    f"scorer for data_source {data_source!r} returned keys {sorted(keys)} but earlier samples "
                    f"returned {sorted(self.keys)}; every sample of a data source must return the same keys"
                )
        return {k: out[k] for k in self.keys}

    # -- calls ----------------------------------------------------------------------------------------
    def single(self, data_source: str, solution_str, ground_truth, extra_info=None, **kwargs) -> dict[str, Any]:
        if self.score_fn is not None:
            res = self.score_fn(solution_str, ground_truth, extra_info, **kwargs)
        else:
            out = self.batch_fn([solution_str], [ground_truth], [extra_info], **kwargs)
            if len(out) != 1:
                raise RewardError(f"batch scorer for {data_source!r} returned {len(out)} results for 1 sample")
            res = out[0]
        return self._normalise(data_source, res)

    def batch(self, data_source: str, solution_strs, ground_truths, extra_infos, **kwargs) -> list[dict[str, Any]]:
        if self.batch_fn is not None:
            out = list(self.batch_fn(list(solution_strs), list(ground_truths), list(extra_infos), **kwargs))
            if len(out) != len(solution_strs):
                raise RewardError(
                    f"batch scorer for {data_source!r} returned {len(out)} results for {len(solution_strs)} samples"
                )
        else:
            out = [self.score_fn(s, g, e, **kwargs) for s, g, e in zip(solution_strs, ground_truths, extra_infos)]
        return [self._normalise(data_source, r) for r in out]


_REGISTRY: dict[str, Scorer] = {}
_BUILTINS_LOADED = False
_LOAD_LOCK = threading.RLock()


def register(
    data_source: str,
    score_fn: Callable[..., Any] | None = None,
    batch_fn: Callable[..., Any] | None = None,
    aliases: Iterable[str] = (),
    keys: Sequence[str] | None = None,
) -> Scorer:
    """Register a scorer under ``data_source`` (and each alias). Re-registering a key replaces it.

    ``keys`` optionally declares the component keys up front (``"score"`` is added); otherwise they are fixed by
    the first result.
    """
    if not isinstance(data_source, str) or not data_source:
        raise ValueError(f"data_source must be a non-empty str, got {data_source!r}")
    if score_fn is None and batch_fn is None:
        raise ValueError(f"register({data_source!r}): give score_fn, batch_fn or both")
    for fn, what in ((score_fn, "score_fn"), (batch_fn, "batch_fn")):
        if fn is not None and not callable(fn):
            raise TypeError(f"register({data_source!r}): {what} is not callable: {fn!r}")
    declared = None
    if keys is not None:
        declared = ("score",) + tuple(k for k in keys if k != "score")
    aliases = tuple(aliases)
    scorer = Scorer(data_source, score_fn, batch_fn, aliases, declared)
    with _LOAD_LOCK:
        for key in (data_source,) + aliases:
            _REGISTRY[key] = scorer
    return scorer


def unregister(data_source: str) -> None:
    """Remove ``data_source`` (only that key; aliases registered with it stay)."""
    with _LOAD_LOCK:
        _REGISTRY.pop(data_source, None)


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    with _LOAD_LOCK:
        if _BUILTINS_LOADED:
            return
        for mod in BUILTIN_MODULES:
            try:
                importlib.import_module(mod)
            except ModuleNotFoundError as exc:
                if exc.name != mod:  # the module exists but one of its imports is missing: a real error
                    raise
        _BUILTINS_LOADED = True


def registered() -> list[str]:
    """All registered data_source keys (aliases included), sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def get_scorer(data_source: str) -> Scorer:
    _load_builtins()
    try:
        return _REGISTRY[data_source]
    except (KeyError, TypeError):
        raise UnknownDataSourceError(
            f"no reward registered for data_source {data_source!r}; registered: {', '.join(sorted(_REGISTRY))}"
        ) from None


def _routed(data_source: str, data_source_map: Mapping[str, str] | None) -> str:
    return (data_source_map or {}).get(data_source, data_source)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, *,
                  data_source_map: Mapping[str, str] | None = None, **kwargs) -> dict[str, Any]:
    """Score one sample (verl naive-manager signature). Returns ``{"score": float, <components>...}``.

    ``data_source_map`` (a reward kwarg) scores a data source with another one's reward, e.g.
    ``{sk2decompile_structure: sk2decompile_structure_sim}`` (config ``skeleton_rl.structure_reward: sim_exe``).
    """
    ds = _routed(data_source, data_source_map)
    return get_scorer(ds).single(ds, solution_str, ground_truth, extra_info, **kwargs)


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, *,
                        data_source_map: Mapping[str, str] | None = None, **kwargs) -> list[dict]:
    """Score a batch (verl batch-manager signature); one batch call per data source, results in input order
    (``data_source_map`` as for :func:`compute_score`)."""
    data_sources = [_routed(ds, data_source_map) for ds in data_sources]
    n = len(data_sources)
    solution_strs, ground_truths = list(solution_strs), list(ground_truths)
    extra_infos = [None] * n if extra_infos is None else list(extra_infos)
    if not (len(solution_strs) == len(ground_truths) == len(extra_infos) == n):
        raise ValueError(
            f"compute_score_batch: lengths differ (data_sources {n}, solution_strs {len(solution_strs)}, "
            f"ground_truths {len(ground_truths)}, extra_infos {len(extra_infos)})"
        )
    groups: dict[str, list[int]] = {}
    for i, ds in enumerate(data_sources):
        groups.setdefault(ds, []).append(i)
    scorers = {ds: get_scorer(ds) for ds in groups}  # fail before scoring anything
    results: list[dict | None] = [None] * n
    for ds, idx in groups.items():
        outs = scorers[ds].batch(
            ds, [solution_strs[i] for i in idx], [ground_truths[i] for i in idx], [extra_infos[i] for i in idx],
            **kwargs,
        )
        for i, r in zip(idx, outs):
            results[i] = r
    if len(groups) > 1:  # mixed batch: every sample carries the union of keys
        all_keys: list[str] = []
        for r in results:
            for k in r:
                if k not in all_keys:
                    all_keys.append(k)
        results = [{k: r.get(k, 0.0) for k in all_keys} for r in results]
    return results  # type: ignore[return-value]

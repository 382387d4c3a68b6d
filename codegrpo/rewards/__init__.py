"""The reward table: one scorer per ``data_source`` key, imported on first use.

:data:`REWARD_TABLE` maps each data_source key (:mod:`codegrpo.contracts`) to a :class:`RewardSpec`: the module
and function names of its scorer and its component keys. Nothing is imported until a key is first scored
(like verl's ``default_compute_score`` dispatcher, which imports a reward module inside the branch of its data
source): importing this package imports no reward module, no torch and no verl, and scoring ``kodcode`` never
imports the compile engine. Reward modules do not import this package.

Two entry points mirror verl's reward managers:

* :func:`compute_score` — one sample (the naive manager's keyword signature);
* :func:`compute_score_batch` — a whole batch (the batch manager's signature). Samples are grouped by data source
  and each scorer's batch function is called **once** with all of its samples, so scorers that need the whole
  batch (deduplicated compile checks, one embedding request, batch-relative rewards) see it.

Every result is a dict with ``"score"`` plus the fixed component keys of its data source (verl turns every
key into a per-sample array, so all samples must carry the same keys; a scorer that returns other keys is an
error). When one batch mixes data sources, :func:`compute_score_batch` returns the union of their keys, a
component a scorer does not produce being ``0.0``. An unknown data source is an
:class:`UnknownDataSourceError` that lists the known keys.

Scorer functions:

* ``score_fn(solution_str, ground_truth, extra_info=None, **kwargs) -> dict | float``
* ``batch_fn(solution_strs, ground_truths, extra_infos, **kwargs) -> list[dict | float]``

Either may be omitted: a missing batch function loops over ``score_fn``; a missing single function calls
``batch_fn`` with a batch of one. A plain number result becomes ``{"score": float(x)}``.

:func:`register` adds a scorer given as callables at run time (tests, experiments); it cannot replace a key of
the table.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

from codegrpo.contracts import (
    DHRCL_RESULT_KEYS,
    KODCODE,
    LLM4DECOMPILE_EXE,
    SK2D_IDENTIFIER,
    SK2D_STRUCTURE,
    SK2D_STRUCTURE_SIM,
    TOY_TARGET_CHARS,
)

__all__ = [
    "RewardError",
    "UnknownDataSourceError",
    "RewardSpec",
    "REWARD_TABLE",
    "register",
    "unregister",
    "registered",
    "get_scorer",
    "compute_score",
    "compute_score_batch",
    "forward_env",
]

# Environment variables that are not settings but that the reward may need in the process verl scores in (the
# TaskRunner Ray actor): API keys of an embedding service (the reference's QWEN3_/GTE_EMBEDDING_* and
# OPENAI_API_KEY) and Hugging Face's offline switches. The training driver forwards them to Ray's workers (Ray
# runtime_env env_vars). Settings are not forwarded: the reward reads them from the run's settings.json
# ($CODEGRPO_RUN_SETTINGS, codegrpo.runsettings), the only project variable the workers get.
FORWARD_ENV_PREFIXES = (
    "QWEN3_EMBEDDING_",
    "GTE_EMBEDDING_",
    "OPENAI_API_KEY",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
)


def forward_env(environ=None, names=()) -> dict[str, str]:
    """The variables of ``environ`` (default ``os.environ``) the reward may need besides its settings: those
    matching :data:`FORWARD_ENV_PREFIXES`, plus the variables listed in ``names`` (e.g. the one named by
    ``embedding.api_key_env``)."""
    import os

    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k.startswith(FORWARD_ENV_PREFIXES) or k in names}


class RewardError(RuntimeError):
    """A scorer returned something that cannot be handed to verl, or a table entry names no function."""


class UnknownDataSourceError(KeyError):
    """No scorer for a data source; the message names it and the known keys."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class RewardSpec:
    """Where a data source's scorer lives: ``module`` and the names of its functions in it (at least one)."""

    module: str
    score: str | None = None  # single-sample function
    batch: str | None = None  # batch function
    keys: tuple[str, ...] = ()  # component keys besides "score" (every result must carry exactly these)


_STRUCTURE = RewardSpec("codegrpo.rewards.sk2d", "exe_type_score", "exe_type_batch", ("compile", "type_jaccard"))

#: data_source -> scorer. Keys sharing one spec share one scorer (``llm4decompile_exe`` is the legacy name of
#: ``sk2decompile_structure``).
REWARD_TABLE: Mapping[str, RewardSpec] = MappingProxyType(
    {
        SK2D_STRUCTURE: _STRUCTURE,
        LLM4DECOMPILE_EXE: _STRUCTURE,
        SK2D_STRUCTURE_SIM: RewardSpec(
            "codegrpo.rewards.sk2d", "sim_exe_score", "sim_exe_batch", ("compile", "token_jaccard")
        ),
        SK2D_IDENTIFIER: RewardSpec(
            "codegrpo.rewards.sk2d", "identifier_score", "identifier_batch", ("cosine", "embedded")
        ),
        KODCODE: RewardSpec("codegrpo.rewards.dhrcl", batch="score_batch", keys=DHRCL_RESULT_KEYS),
        TOY_TARGET_CHARS: RewardSpec("codegrpo.rewards.toy", score="score", keys=("target_share", "length")),
    }
)


@dataclass
class Scorer:
    name: str
    score_fn: Callable[..., Any] | None
    batch_fn: Callable[..., Any] | None
    aliases: tuple[str, ...] = ()
    keys: tuple[str, ...] | None = None  # component keys (with "score"), fixed on the first result
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- result normalisation -------------------------------------------------------------------------
    def _normalize(self, data_source: str, result: Any) -> dict[str, Any]:
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
        return self._normalize(data_source, res)

    def batch(self, data_source: str, solution_strs, ground_truths, extra_infos, **kwargs) -> list[dict[str, Any]]:
        if self.batch_fn is not None:
            out = list(self.batch_fn(list(solution_strs), list(ground_truths), list(extra_infos), **kwargs))
            if len(out) != len(solution_strs):
                raise RewardError(
                    f"batch scorer for {data_source!r} returned {len(out)} results for {len(solution_strs)} samples"
                )
        else:
            out = [self.score_fn(s, g, e, **kwargs) for s, g, e in zip(solution_strs, ground_truths, extra_infos)]
        return [self._normalize(data_source, r) for r in out]


_LOCK = threading.RLock()
_LOADED: dict[RewardSpec, Scorer] = {}  # table scorers imported so far
_EXTRA: dict[str, Scorer] = {}  # scorers added with register()


def _declared(keys: Sequence[str] | None) -> tuple[str, ...] | None:
    if keys is None:
        return None
    return ("score",) + tuple(k for k in keys if k != "score")


def register(
    data_source: str,
    score_fn: Callable[..., Any] | None = None,
    batch_fn: Callable[..., Any] | None = None,
    aliases: Iterable[str] = (),
    keys: Sequence[str] | None = None,
) -> Scorer:
    """Add a scorer given as callables under ``data_source`` (and each alias); re-registering replaces it.

    Keys of :data:`REWARD_TABLE` cannot be replaced. ``keys`` optionally declares the component keys up front
    (``"score"`` is added); otherwise they are fixed by the first result.
    """
    if not isinstance(data_source, str) or not data_source:
        raise ValueError(f"data_source must be a non-empty str, got {data_source!r}")
    if score_fn is None and batch_fn is None:
        raise ValueError(f"register({data_source!r}): give score_fn, batch_fn or both")
    for fn, what in ((score_fn, "score_fn"), (batch_fn, "batch_fn")):
        if fn is not None and not callable(fn):
            raise TypeError(f"register({data_source!r}): {what} is not callable: {fn!r}")
    aliases = tuple(aliases)
    for key in (data_source,) + aliases:
        if key in REWARD_TABLE:
            raise ValueError(
                f"register({key!r}): {key!r} is a key of the reward table (codegrpo.rewards."
                "REWARD_TABLE); change the table instead"
            )
    scorer = Scorer(data_source, score_fn, batch_fn, aliases, _declared(keys))
    with _LOCK:
        for key in (data_source,) + aliases:
            _EXTRA[key] = scorer
    return scorer


def unregister(data_source: str) -> None:
    """Remove a key added with :func:`register` (only that key; aliases registered with it stay)."""
    with _LOCK:
        _EXTRA.pop(data_source, None)


def registered() -> list[str]:
    """All known data_source keys (the table's and registered ones), sorted; imports no reward module."""
    return sorted(set(REWARD_TABLE) | set(_EXTRA))


def _load(data_source: str, spec: RewardSpec) -> Scorer:
    with _LOCK:
        scorer = _LOADED.get(spec)
        if scorer is not None:
            return scorer
        module = importlib.import_module(spec.module)
        fns = []
        for name in (spec.score, spec.batch):
            fn = None
            if name is not None:
                fn = getattr(module, name, None)
                if not callable(fn):
                    raise RewardError(f"reward table entry {data_source!r}: {spec.module}.{name} is not a function")
            fns.append(fn)
        if fns == [None, None]:
            raise RewardError(f"reward table entry {data_source!r} names no function of {spec.module}")
        keys = [k for k, v in REWARD_TABLE.items() if v is spec] or [data_source]
        canonical, aliases = keys[0], tuple(keys[1:])
        scorer = Scorer(canonical, fns[0], fns[1], aliases, _declared(spec.keys))
        _LOADED[spec] = scorer
        return scorer


def get_scorer(data_source: str) -> Scorer:
    """The scorer of ``data_source``, importing its module on first use."""
    spec = REWARD_TABLE.get(data_source) if isinstance(data_source, str) else None
    if spec is not None:
        return _load(data_source, spec)
    try:
        return _EXTRA[data_source]
    except (KeyError, TypeError):
        raise UnknownDataSourceError(
            f"no reward for data_source {data_source!r}; known data sources: {', '.join(registered())}"
        ) from None


def _routed(data_source: str, data_source_map: Mapping[str, str] | None) -> str:
    return (data_source_map or {}).get(data_source, data_source)


def compute_score(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    *,
    data_source_map: Mapping[str, str] | None = None,
    **kwargs,
) -> dict[str, Any]:
    """Score one sample (verl naive-manager signature). Returns ``{"score": float, <components>...}``.

    ``data_source_map`` (a reward kwarg) scores a data source with another one's reward, e.g.
    ``{sk2decompile_structure: sk2decompile_structure_sim}`` (config ``skeleton_rl.structure_reward: sim_exe``).
    """
    ds = _routed(data_source, data_source_map)
    return get_scorer(ds).single(ds, solution_str, ground_truth, extra_info, **kwargs)


def compute_score_batch(
    data_sources,
    solution_strs,
    ground_truths,
    extra_infos=None,
    *,
    data_source_map: Mapping[str, str] | None = None,
    **kwargs,
) -> list[dict]:
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
            ds,
            [solution_strs[i] for i in idx],
            [ground_truths[i] for i in idx],
            [extra_infos[i] for i in idx],
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

"""SK²Decompile rewards, with the reference semantics (``sk2decompile.md`` §2); their data sources route here
through the reward table (:data:`codegrpo.rewards.REWARD_TABLE`).

| data_source | reward | components (always present) |
|---|---|---|
| ``sk2decompile_structure`` (alias ``llm4decompile_exe``) | ``exe_type`` (Eq. 3) | ``compile``, ``type_jaccard`` |
| ``sk2decompile_structure_sim`` | ``sim_exe`` | ``compile``, ``token_jaccard`` |
| ``sk2decompile_identifier`` | identifier-summary embedding, cos² (Eq. 4 as implemented) | ``cosine``, ``embedded`` |

Where the reference raises on malformed input (``None`` or another non-str solution / ground truth, text that
cannot be encoded), these functions return 0.0 with every component 0.0 instead. All other quirks are kept; see
``docs/rewards.md``. The batch scorers compile through :mod:`codegrpo.rewards.compile` (deduplicated, cached,
parallel) and embed through :mod:`codegrpo.rewards.embedding` (one request per chunk for the whole batch).
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

from codegrpo.rewards.c_syntax import c_parser
from codegrpo.rewards.compile import compile_reference, default_engine

# --------------------------------------------------------------------------------------------------------------
# Structure recovery: placeholder Jaccard + compile (exe_type), token Jaccard + compile (sim_exe)
# --------------------------------------------------------------------------------------------------------------

# Four separate prefix patterns (str patterns: Unicode \w; case-sensitive), matches merged into one set.
_PLACEHOLDER_RES = tuple(re.compile(p) for p in (r"\bfunc\w*\b", r"\btype\w*\b", r"\bvar\w*\b", r"\bfield\w*\b"))


def placeholder_terms(text: str) -> set[str]:
    """Union of the matches of the four placeholder regexes (kind not kept)."""
    terms: set[str] = set()
    for rx in _PLACEHOLDER_RES:
        terms.update(rx.findall(text))
    return terms


def _jaccard(a: set, b: set) -> float:
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def type_jaccard(solution_str: str, ground_truth: str) -> float:
    """Jaccard of the placeholder-like words (0.0 when both sets are empty)."""
    return _jaccard(placeholder_terms(solution_str), placeholder_terms(ground_truth))


def token_jaccard(solution_str: str, ground_truth: str) -> float:
    """Jaccard of lower-cased whitespace tokens (``str.split()``; 0.0 when both are empty)."""
    return _jaccard(set(solution_str.lower().split()), set(ground_truth.lower().split()))


_NO_HEADER = object()  # extra_info whose header cannot be read: the reference's try/except gives compile 0.0


def header_of(extra_info) -> Any:
    """The reference header rule: ``extra_info.get('header', '') if extra_info else ''``.

    ``None``/``{}`` extra_info or a missing key → ``''``; a present ``None`` value stays ``None`` (and is written
    as the text ``None``). An object without ``.get`` makes the reference's compile step raise inside its try →
    :data:`_NO_HEADER` (compile 0.0).
    """
    try:
        return extra_info.get("header", "") if extra_info else ""
    except Exception:
        return _NO_HEADER


def _valid(*texts) -> bool:
    return all(isinstance(t, str) for t in texts)


def _exe_type_result(tj: float, comp: float) -> dict[str, float]:
    return {"score": 0.0 if comp == 0 else tj + 1.0, "compile": comp, "type_jaccard": tj}


def _sim_exe_result(j: float, comp: float) -> dict[str, float]:
    return {"score": j + comp if j > 0.5 else 0.0, "compile": comp, "token_jaccard": j}


def _compile_one_reference(extra_info, solution_str) -> float:
    header = header_of(extra_info)
    if header is _NO_HEADER:
        return 0.0
    return compile_reference(header, solution_str)


def exe_type(solution_str, ground_truth, extra_info=None, **_: Any) -> dict[str, float]:
    """Eq. 3 for one sample, by the reference procedure (serial, fresh temp dir, ``gcc -c``)."""
    if not _valid(solution_str, ground_truth):
        return _exe_type_result(0.0, 0.0)
    tj = type_jaccard(solution_str, ground_truth)
    return _exe_type_result(tj, _compile_one_reference(extra_info, solution_str))


def sim_exe(solution_str, ground_truth, extra_info=None, **_: Any) -> dict[str, float]:
    """``sim_exe`` for one sample, by the reference procedure."""
    if not _valid(solution_str, ground_truth):
        return _sim_exe_result(0.0, 0.0)
    j = token_jaccard(solution_str, ground_truth)
    return _sim_exe_result(j, _compile_one_reference(extra_info, solution_str))


def _compile_batch(solutions: Sequence, extra_infos: Sequence, valid: Sequence[bool], engine=None) -> list[float]:
    """Compile outcomes through the shared engine; invalid samples and unreadable headers get 0.0."""
    out = [0.0] * len(solutions)
    idx, headers, sols = [], [], []
    for i, (s, e, ok) in enumerate(zip(solutions, extra_infos, valid)):
        if not ok:
            continue
        h = header_of(e)
        if h is _NO_HEADER:
            continue
        idx.append(i)
        headers.append(h)
        sols.append(s)
    if idx:
        for i, r in zip(idx, (engine or default_engine()).compile_pairs(headers, sols)):
            out[i] = r
    return out


def _structure_batch(similarity, result, solution_strs, ground_truths, extra_infos, engine) -> list[dict[str, float]]:
    """``result(similarity, compiled)`` per sample (0.0 similarity for an invalid one), compiled in one batch."""
    valid = [_valid(s, g) for s, g in zip(solution_strs, ground_truths)]
    comps = _compile_batch(solution_strs, extra_infos, valid, engine)
    return [
        result(similarity(s, g) if ok else 0.0, c) for s, g, ok, c in zip(solution_strs, ground_truths, valid, comps)
    ]


def exe_type_batch(solution_strs, ground_truths, extra_infos, engine=None, **_: Any) -> list[dict[str, float]]:
    """Batch version; compiles through ``engine`` (default: the per-process :func:`default_engine`)."""
    return _structure_batch(type_jaccard, _exe_type_result, solution_strs, ground_truths, extra_infos, engine)


def sim_exe_batch(solution_strs, ground_truths, extra_infos, engine=None, **_: Any) -> list[dict[str, float]]:
    """Batch version; compiles through ``engine`` (default: the per-process :func:`default_engine`)."""
    return _structure_batch(token_jaccard, _sim_exe_result, solution_strs, ground_truths, extra_infos, engine)


# --------------------------------------------------------------------------------------------------------------
# Identifier naming: tree-sitter identifier summary, embedded, cos²
# --------------------------------------------------------------------------------------------------------------

KINDS = ("func", "type", "field", "var")
CAP_PER_KIND = 64


def identifier_kind(node) -> str | None:
    """The summary's kind of a tree-sitter C node (``type``, ``field``, ``func``, ``var``), or None when the node
    is no identifier the summary counts; the obfuscator names what it hides with the same classes."""
    t = node.type
    if t == "type_identifier":
        return "type"
    if t == "field_identifier":
        return "field"
    if t == "identifier":
        parent = node.parent
        if parent is not None:
            if parent.type == "function_declarator" and parent.child_by_field_name("declarator") == node:
                return "func"
            if parent.type == "call_expression" and parent.child_by_field_name("function") == node:
                return "func"
        return "var"
    return None


def extract_identifiers(code: str) -> dict[str, list[str]]:
    """Identifiers by kind, in the reference's traversal order (stack; pop last; push children in order).

    Siblings are therefore visited right to left; duplicates are kept; each kind keeps its first 64 names in
    traversal order. Raises ``UnicodeError`` where the reference does (text that is not encodable as UTF-8).
    """
    tree = c_parser().parse(code.encode("utf8"))
    found: dict[str, list[str]] = {k: [] for k in KINDS}
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        kind = identifier_kind(node)
        if kind is not None and len(found[kind]) < CAP_PER_KIND:
            found[kind].append(node.text.decode("utf8"))
        stack.extend(node.children)
    return found


def summarize_identifiers(found: dict[str, list[str]]) -> str:
    parts = [f"{k}: " + " ".join(found[k][:CAP_PER_KIND]) for k in KINDS if found.get(k)]
    return " || ".join(parts)


def identifier_summary(code) -> str:
    """The reference's identifier summary of ``code`` (e.g. ``func: putchar || var: var1 var2``), '' if none."""
    return summarize_identifiers(extract_identifiers(code))


def _as_text(x) -> str:
    """The reference's input coercion: None → '', other non-str → str(x); then strip."""
    if x is None:
        return ""
    if not isinstance(x, str):
        x = str(x)
    return x.strip()


def _summary_or_none(x) -> str | None:
    """Summary for the embedding request, or None when the reference returns 0.0 without a request."""
    text = _as_text(x)
    if not text:
        return None
    try:
        summary = identifier_summary(text)
    except UnicodeError:  # the reference raises here; we score 0.0
        return None
    return summary or None


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine in pure Python floats (as the reference); 0.0 when a norm is 0.

    ``dot / (|a| |b|)`` can round a few ulps outside [-1, 1] (``|a| = sqrt(dot)`` for equal vectors, then the
    division rounds up for some vectors), so the result is clamped to [-1, 1]: the one deviation from the
    reference, at most a few ulps, which keeps ``cos²`` inside its documented range [0, 1] on every machine.
    """
    a = [float(x) for x in a]
    b = [float(x) for x in b]
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0 or nb == 0:
        return 0.0
    return max(-1.0, min(1.0, dot / (na * nb)))


def _identifier_result(cos: float | None) -> dict[str, float]:
    if cos is None:
        return {"score": 0.0, "cosine": 0.0, "embedded": 0.0}
    return {"score": cos * cos, "cosine": cos, "embedded": 1.0}


def identifier_batch(solution_strs, ground_truths, extra_infos=None, embedder=None, embedding=None, **_: Any):
    """Identifier reward for a batch: every distinct summary is embedded once, in chunked requests.

    ``embedder`` (an :class:`codegrpo.rewards.embedding.Embedder`) or ``embedding`` (a dict of settings that
    override the environment, e.g. passed as verl ``reward_kwargs``) selects the backend; by default the
    per-process embedder configured from ``CODEGRPO_EMBEDDING_*`` (and the reference's env vars) is used.
    Service failures raise :class:`codegrpo.rewards.embedding.EmbeddingServiceError`.
    """
    pairs = [(_summary_or_none(s), _summary_or_none(g)) for s, g in zip(solution_strs, ground_truths)]
    texts = sorted({t for p in pairs if p[0] is not None and p[1] is not None for t in p})
    vectors: dict[str, list[float]] = {}
    if texts:
        if embedder is None:
            from codegrpo.rewards.embedding import get_embedder

            embedder = get_embedder(embedding)
        vectors = embedder.embed_unique(texts)
    out = []
    for cand, ref in pairs:
        if cand is None or ref is None:
            out.append(_identifier_result(None))
        else:
            out.append(_identifier_result(cosine(vectors[cand], vectors[ref])))
    return out


def identifier_score(solution_str, ground_truth, extra_info=None, **kwargs) -> dict[str, float]:
    return identifier_batch([solution_str], [ground_truth], [extra_info], **kwargs)[0]


# --------------------------------------------------------------------------------------------------------------
# Single-sample scorers (the reward table's ``score`` functions): a batch of one
# --------------------------------------------------------------------------------------------------------------


def exe_type_score(solution_str, ground_truth, extra_info=None, **kwargs):
    return exe_type_batch([solution_str], [ground_truth], [extra_info], **kwargs)[0]


def sim_exe_score(solution_str, ground_truth, extra_info=None, **kwargs):
    return sim_exe_batch([solution_str], [ground_truth], [extra_info], **kwargs)[0]

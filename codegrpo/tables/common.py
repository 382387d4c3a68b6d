"""The table type, the result-file reader and the published numbers (codegrpo.tables)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import yaml


PUBLISHED_PATH = Path(__file__).parent.parent / "published.yaml"
LEVELS = ("O0", "O1", "O2", "O3")
OURS, PUBLISHED = "this project", "published"


@dataclass
class Table:
    name: str
    title: str
    columns: list[str]
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def cell(self, row: dict, col: str) -> str:
        v = row.get(col)
        if v is None or v == "":
            return "–"
        if isinstance(v, float):
            return f"{v:.2f}"
        return str(v)


def load_published(path: str | os.PathLike | None = None) -> dict:
    with open(path or PUBLISHED_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def load_results(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Read evaluation JSON files; each result gets ``_path`` (the file, as given)."""
    out = []
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            try:
                res = json.load(fh)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}: line {exc.lineno}: not valid JSON: {exc.msg}") from exc
        for key in ("kind", "benchmark", "system", "provenance"):
            if key not in res:
                raise ValueError(f"{p}: missing field {key!r} (not an evaluation result file)")
        res["_path"] = str(p)
        out.append(res)
    return out


def prov(res: dict) -> dict:
    pv = res["provenance"]
    return {"source": res["_path"], "config": pv.get("config_hash", ""), "date": (pv.get("date") or "")[:10]}


def label(res: dict) -> str:
    return res.get("label") or res["system"]


def subset_note(res: dict) -> str:
    tpl = res.get("tasks_per_level") or {}
    counts = sorted(set(tpl.values()))
    return "/".join(str(c) for c in counts)

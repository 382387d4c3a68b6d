"""Seeds: the runs <name>-seed<seed> of one configuration become one row, mean ± std (codegrpo.tables)."""

from __future__ import annotations

import re
import statistics
from typing import Iterable, Sequence

from codegrpo.tables.common import Table


SEED_RE = re.compile(r"^(?P<base>.+)-seed(?P<seed>[0-9]+)$")


def split_seed(run: str) -> tuple[str, int | None]:
    """``("dhrcl-full", 2)`` for ``dhrcl-full-seed2``; ``(run, None)`` for a run without a seed suffix."""
    m = SEED_RE.match(run)
    return (m["base"], int(m["seed"])) if m else (run, None)


class MeanStd(float):
    """The mean of a value over seeds (a float, so comparisons and sums use the mean) that formats as
    ``mean ± std``: the sample standard deviation (n - 1), left out for a single seed."""

    def __new__(cls, values: Iterable[float]):
        vals = tuple(float(v) for v in values)
        if not vals:
            raise ValueError("MeanStd needs at least one value")
        obj = super().__new__(cls, statistics.fmean(vals))
        obj.values = vals
        obj.std = statistics.stdev(vals) if len(vals) > 1 else None
        return obj

    def __format__(self, spec: str) -> str:
        mean = float.__format__(self, spec)
        return mean if self.std is None else f"{mean} ± {format(self.std, spec)}"

    def __str__(self) -> str:
        return format(self, ".2f")

    __repr__ = __str__


def merge_seed_rows(t: Table, value_cols: Sequence[str], run_key: str = "_run") -> Table:
    """Merge the rows of ``t`` whose ``run_key`` names runs ``<base>-seed<seed>`` into one row per base: value
    columns become :class:`MeanStd` over the seeds that have a value, a ``seeds`` column (added before
    ``source``) lists the seeds, sources / configs are joined and the date is the latest. Rows without a seed
    suffix are kept as they are. Where a value is missing for some seed, a note says so.
    """
    groups: dict[str, list[tuple[int | None, dict]]] = {}
    order: list = []
    for row in t.rows:
        run = row.get(run_key)
        base, seed = split_seed(run) if run else (None, None)
        if seed is None:
            order.append(row)
            continue
        if base not in groups:
            groups[base] = []
            order.append(base)
        groups[base].append((seed, row))
    if not groups:
        return t
    if "seeds" not in t.columns:
        t.columns.insert(t.columns.index("source") if "source" in t.columns else len(t.columns), "seeds")
    rows = []
    for item in order:
        if isinstance(item, dict):
            rows.append(item)
            continue
        members = sorted(groups[item], key=lambda sr: sr[0])
        seeds = [sd for sd, _ in members]
        first = members[0][1]
        merged = dict(first)
        label = str(first.get("method", ""))
        merged["method"] = label[: -len(f"-seed{seeds[0]}")] if label.endswith(f"-seed{seeds[0]}") else label
        merged[run_key] = item
        for col in value_cols:
            have = [(sd, r[col]) for sd, r in members if r.get(col) is not None]
            merged[col] = MeanStd(v for _, v in have) if have else None
            if have and len(have) < len(members):
                t.notes.append(
                    f"{merged['method']}: {col} averaged over seeds {[sd for sd, _ in have]} only "
                    f"(missing for the others)"
                )
        merged["seeds"] = ", ".join(str(sd) for sd in seeds)
        for col, sep in (("source", "; "), ("config", "; ")):
            if col in first:
                merged[col] = sep.join(
                    dict.fromkeys(x for _, r in members for x in str(r.get(col) or "").split(sep) if x)
                )
        if "date" in first:
            merged["date"] = max(str(r.get("date") or "") for _, r in members)
        rows.append(merged)
    t.rows = rows
    t.notes.append(
        "Runs trained with several seeds (<run>-seed<N>) are one row: mean ± sample standard deviation "
        "over the seeds in column 'seeds' (no ± for a single seed)."
    )
    return t

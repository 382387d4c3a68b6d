"""Paper tables from evaluation result files only, in Markdown, CSV and LaTeX.

Inputs are the JSON files the evaluation stage writes (``results/eval/<system>/<benchmark>.json``); each
carries its provenance (model, config hash, date). Published reference rows come from
``codegrpo/published.yaml`` with their source notes. Every row of our own names the file it was read from.

Tables:
1. ``reexec``: re-executability (%) per optimisation level and average on HumanEval-Decompile and
   MBPP-Decompile side by side, with the protocol (``sk2decompile`` / ``llm4decompile``) of every number.
2. ``ablation``: the RL ablation (paper Table 4) beside our systems that carry the same variant label.
3. ``dhrcl``: DHRCL and its baselines / ablations: Pass@1 per benchmark (the paper's suites: HumanEval and
   HumanEval+ from EvalPlus, MBPP / MBPP+, BigCodeBench Full / Hard, LiveCodeBench v6; CodeElo published only),
   the paper's average (ours over five of its six), syntax / exec accuracy, benchmark versions in the notes; the
   runs ``<run>-seed<N>`` of one variant are one row, mean ± std over the seeds (:func:`merge_seed_rows`).
4. ``identifier``: identifier-naming quality (the identifier reward as a metric).
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

from codegrpo.tables.common import (
    LEVELS,
    OURS,
    PUBLISHED,
    PUBLISHED_PATH,
    Table,
    label,
    load_published,
    load_results,
    prov,
    subset_note,
)
from codegrpo.tables.seeds import MeanStd, SEED_RE, merge_seed_rows, split_seed
from codegrpo.tables.writers import FORMATS, tex_escape, to_csv, to_html, to_latex, to_markdown, write_table
from codegrpo.tables.paper import (
    BENCH_COLUMNS,
    DEC_BENCHMARKS,
    OWN_BENCH_TITLES,
    PAPER_SIX,
    PROTOCOL_NOTES,
    protocol_cell,
    protocol_notes,
    reexec_columns,
    table_ablation,
    table_dhrcl,
    table_identifier,
    table_reexec,
)
from codegrpo.tables.efficiency import EFFICIENCY_COLUMNS, table_efficiency

__all__ = [
    "BENCH_COLUMNS",
    "DEC_BENCHMARKS",
    "EFFICIENCY_COLUMNS",
    "FORMATS",
    "LEVELS",
    "MeanStd",
    "OURS",
    "OWN_BENCH_TITLES",
    "PAPER_SIX",
    "PROTOCOL_NOTES",
    "PUBLISHED",
    "PUBLISHED_PATH",
    "SEED_RE",
    "TABLE_NAMES",
    "Table",
    "build_tables",
    "label",
    "load_published",
    "load_results",
    "merge_seed_rows",
    "protocol_cell",
    "protocol_notes",
    "prov",
    "reexec_columns",
    "split_seed",
    "subset_note",
    "table_ablation",
    "table_dhrcl",
    "table_efficiency",
    "table_identifier",
    "table_reexec",
    "tex_escape",
    "to_csv",
    "to_html",
    "to_latex",
    "to_markdown",
    "write_table",
]

TABLE_NAMES = ("reexec", "ablation", "dhrcl", "identifier")


def build_tables(
    result_paths: Iterable[str | os.PathLike],
    out_dir: str | os.PathLike,
    published_path: str | os.PathLike | None = None,
    codegen_benchmarks: Sequence[str] = ("kodcode_heldout", "humaneval"),
) -> dict[str, Table]:
    """Build every table from the result files and write ``<name>.{md,csv,tex}`` into ``out_dir``."""
    results = load_results(sorted(str(p) for p in result_paths))
    published = load_published(published_path)
    tables = {
        "reexec": table_reexec(results, published),
        "ablation": table_ablation(results, published),
        "dhrcl": table_dhrcl(results, published, benchmarks=codegen_benchmarks),
        "identifier": table_identifier(results),
    }
    for t in tables.values():
        write_table(t, out_dir)
    return tables

"""Snakemake script of rule data_normalize: SK2Decompile pseudo-code normalisation of one dataset."""

from codegrpo.data.normalize import normalize_records
from codegrpo.io import atomic_group, read_jsonl, write_json, write_jsonl
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    cfg = sm.params.settings
    kept, dropped, summary = normalize_records(
        read_jsonl(sm.input.records),
        enabled=bool(sm.params.enabled),
        clang_format_path=cfg["clang_format"],
        timeout=cfg["clang_format_timeout"],
        min_lines=cfg["min_lines"],
        max_lines=cfg["max_lines"],
        style=cfg["clang_format_style"],
    )
    if not kept:
        raise ValueError(f"{sm.input.records}: the normaliser dropped every record ({summary['dropped_by_reason']})")
    with atomic_group():  # all three outputs or none
        write_jsonl(sm.output.records, kept)
        write_jsonl(sm.output.dropped, dropped)
        write_json(sm.output.summary, summary)

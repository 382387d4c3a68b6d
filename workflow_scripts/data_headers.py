"""Snakemake script of rule data_headers: header validation (gcc) and optional Psyche-C regeneration."""

import json

from codegrpo.data.headers import PsycheC, validate_headers, write_dataset_outputs
from codegrpo.io import read_jsonl
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    cfg = sm.params.settings
    enabled = bool(sm.params.enabled)
    psychec = None
    if enabled:
        psychec = PsycheC(cfg["psychecgen"], cfg["psychecsolver"], timeout=cfg["psychec_timeout"])
    records, header_summary = validate_headers(
        read_jsonl(sm.input.records),
        enabled=enabled,
        gcc=cfg["gcc"],
        gcc_timeout=cfg["gcc_timeout"],
        psychec=psychec,
        workers=cfg["workers"] or sm.threads,
    )
    with open(sm.input.ingest_summary, encoding="utf-8") as fh:
        ingest_summary = json.load(fh)
    with open(sm.input.normalize_summary, encoding="utf-8") as fh:
        normalize_summary = json.load(fh)
    write_dataset_outputs(
        records,
        header_summary,
        ingest_summary=ingest_summary,
        normalize_summary=normalize_summary,
        records_path=sm.output.records,
        tsv_path=sm.output.tsv,
        summary_path=sm.output.summary,
    )

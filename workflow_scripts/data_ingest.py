"""Snakemake script of rule data_ingest: read and validate one configured dataset."""

from codegrpo.data.ingest import ingest_to_files
from codegrpo.workflow import script_job

with script_job(snakemake, f"data_ingest {snakemake.params.name}") as sm:  # noqa: F821  (injected by Snakemake)
    ingest_to_files(
        sm.params.name,
        dict(sm.params.dataset),
        records_path=sm.output.records,
        rejects_path=sm.output.rejects,
        summary_path=sm.output.summary,
        on_bad_record=sm.params.on_bad_record,
        max_line_bytes=sm.params.max_line_bytes,
        aliases=dict(sm.params.aliases),
    )

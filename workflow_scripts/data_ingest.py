"""Snakemake script of rule data_ingest: read and validate one configured dataset."""

from codegrpo.data.ingest import ingest_to_files
from codegrpo.io import log_to
from codegrpo.workflow import failure_logged

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("data_ingest %s failed", sm.params.name):
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

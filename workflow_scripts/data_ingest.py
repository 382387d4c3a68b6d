"""Snakemake script of rule data_ingest: read and validate one configured dataset."""

import logging

from codegrpo.data.ingest import ingest_to_files

sm = snakemake  # noqa: F821  (injected by Snakemake)
logging.basicConfig(filename=sm.log[0], filemode="w", level=logging.INFO,
                    format="%(asctime)s %(levelname)s %(name)s: %(message)s")
try:
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
except Exception:
    logging.exception("data_ingest %s failed", sm.params.name)
    raise

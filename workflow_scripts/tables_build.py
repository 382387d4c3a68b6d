"""Snakemake script of rule tables_build: every paper table from the evaluation result files."""

import logging
import os

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.tables import build_tables

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("tables_build failed"):
    built = build_tables(
        list(sm.input.results),
        os.path.dirname(sm.output[0]),
        published_path=sm.input.published or None,
        codegen_benchmarks=sm.params.benchmarks,
    )
    for name, table in built.items():
        logging.info("table %s: %d rows", name, len(table.rows))

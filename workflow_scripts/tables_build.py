"""Snakemake script of rule tables_build: every paper table from the evaluation result files."""

import logging
import os

from codegrpo.workflow import script_job
from codegrpo.tables import build_tables

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    built = build_tables(
        list(sm.input.results),
        os.path.dirname(sm.output[0]),
        published_path=sm.input.published or None,
        codegen_benchmarks=sm.params.benchmarks,
    )
    for name, table in built.items():
        logging.info("table %s: %d rows", name, len(table.rows))

"""Snakemake script of rule report_codegen: pass@1, syntax and execution accuracy (report figure)."""

import logging

from codegrpo.workflow import script_job
from codegrpo.plots import plot_codegen
from codegrpo.tables import load_results

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    n = plot_codegen(load_results(list(sm.input.results)), sm.output[0])
    logging.info("code generation figure: %d bars groups", n)

"""Snakemake script of rule report_codegen: pass@1, syntax and execution accuracy (report figure)."""

import logging

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.plots import plot_codegen
from codegrpo.tables import load_results

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("report_codegen failed"):
    n = plot_codegen(load_results(list(sm.input.results)), sm.output[0])
    logging.info("code generation figure: %d bars groups", n)

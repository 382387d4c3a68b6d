"""Snakemake script of rule report_reexec: re-executability by optimisation level (report figure)."""

import logging

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.plots import plot_reexec
from codegrpo.tables import load_published, load_results

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("report_reexec failed"):
    n = plot_reexec(load_results(list(sm.input.results)), sm.output[0], load_published(sm.input.published or None))
    logging.info("re-executability figure: %d series", n)

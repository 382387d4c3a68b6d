"""Snakemake script of rule report_reexec: re-executability by optimisation level (report figure)."""

import logging

from codegrpo.workflow import script_job
from codegrpo.plots import plot_reexec
from codegrpo.tables import load_published, load_results

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    n = plot_reexec(load_results(list(sm.input.results)), sm.output[0], load_published(sm.input.published or None))
    logging.info("re-executability figure: %d series", n)

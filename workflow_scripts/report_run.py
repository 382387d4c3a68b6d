"""Snakemake script of rule report_run: one training run's reward components, KL and curriculum (report figure)."""

import logging

from codegrpo.workflow import script_job
from codegrpo.plots import plot_run

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    info = plot_run(sm.params.metrics, sm.output[0], run=sm.wildcards.run, curriculum_path=sm.params.curriculum)
    logging.info(
        "run %s: %d steps, panels %s, transitions %s",
        sm.wildcards.run,
        info["steps"],
        info["panels"],
        info["transitions"],
    )

"""Snakemake script of rule report_run: one training run's reward components, KL and curriculum (report figure)."""

import logging

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.plots import plot_run

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("report_run failed"):
    info = plot_run(sm.params.metrics, sm.output[0], run=sm.wildcards.run, curriculum_path=sm.params.curriculum)
    logging.info(
        "run %s: %d steps, panels %s, transitions %s",
        sm.wildcards.run,
        info["steps"],
        info["panels"],
        info["transitions"],
    )

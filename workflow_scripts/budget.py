"""Snakemake script of rule budget: the plan-time budget (codegrpo.budget) as results/budget.{md,json}."""

import logging

from codegrpo.budget import write_budget
from codegrpo.io import log_to
from codegrpo.workflow import failure_logged

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("budget failed"):
    budget = write_budget(sm.config, sm.output.json, sm.output.md, command="snakemake budget")
    logging.info(
        "budget: %d training jobs, %d steps, %.0f GB on disk, %.0f GPU-hours",
        budget["totals"]["jobs"],
        budget["totals"]["steps"],
        budget["totals"]["disk_gb"],
        budget["totals"]["gpu_hours"],
    )
    for problem in budget["problems"]:  # preflight refuses the plan for them (codegrpo.preflight.plan_checks)
        logging.warning("budget problem: %s", problem)

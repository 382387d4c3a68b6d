"""Snakemake script of rule budget: the plan-time budget (codegrpo.budget) as results/budget.{md,json}."""

import logging

from codegrpo.budget import write_budget
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
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

"""Snakemake script of rule learning_curriculum: SFT on a few KodCode solutions, then a trend-driven DHRCL run."""

import logging

from codegrpo.workflow import script_job
from codegrpo.learning import run_curriculum_check

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    v = run_curriculum_check(sm.params.cfg, out_dir=sm.params.out_dir)
    logging.info("curriculum check: %s; transitions %s", "pass" if v["passed"] else "FAIL", v["transitions"])

"""Snakemake script of rule learning_curriculum: SFT on a few KodCode solutions, then a trend-driven DHRCL run."""

import logging

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.learning import run_curriculum_check

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("learning_curriculum failed"):
    v = run_curriculum_check(sm.params.cfg, out_dir=sm.params.out_dir)
    logging.info("curriculum check: %s; transitions %s", "pass" if v["passed"] else "FAIL", v["transitions"])

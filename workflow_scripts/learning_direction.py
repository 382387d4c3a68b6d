"""Snakemake script of rule learning_direction: one toy GRPO run with the policy loss of {check}."""

import logging

from codegrpo.workflow import script_job
from codegrpo.learning import run_direction_check

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    v = run_direction_check(
        sm.params.cfg,
        sm.wildcards.check,
        train_files=sm.input.train,
        val_files=sm.input.val,
        init_model=sm.input.tiny,
        run_dir=sm.params.run_dir,
    )
    logging.info(
        "%s: first %.3f, last %.3f, change %+.3f (expect %s, margin %s): %s",
        v["check"],
        v["first"],
        v["last"],
        v["delta"],
        v["expect"],
        v["margin"],
        "pass" if v["passed"] else "FAIL",
    )

"""Snakemake script of rule learning_real_train: one GRPO run of learning_real (codegrpo.learning_real)."""

import logging

from codegrpo.learning_real import train_variant
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    done = train_variant(
        sm.params.cfg,
        sm.wildcards.variant,
        data_dir=sm.params.data_dir,
        init_model=sm.params.init_model,
        run_dir=sm.params.run_dir,
    )
    logging.info("learning_real %s: final step %s", sm.wildcards.variant, done["final_step"])

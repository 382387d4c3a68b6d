"""Snakemake script of rule learning_real_train: one GRPO run of learning_real (codegrpo.learning_real): a variant,
or a training-noise run ``<variant>.train<seed>``."""

import logging

from codegrpo.learning_real import parse_run, train_variant
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    variant, seed = parse_run(sm.wildcards.run)
    done = train_variant(
        sm.params.cfg,
        variant,
        data_dir=sm.params.data_dir,
        init_model=sm.params.init_model,
        run_dir=sm.params.run_dir,
        seed=seed,
    )
    logging.info("learning_real %s: final step %s", sm.wildcards.run, done["final_step"])

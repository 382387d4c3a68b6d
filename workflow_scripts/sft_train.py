"""Snakemake script of rule sft_train: train (or import) sft_<which> and export it to results/runs/<run>/hf."""

import logging

from codegrpo.verl.stages import run_sft
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    done = run_sft(
        sm.params.cfg,
        sm.wildcards.which,
        train_files=sm.params.train,
        val_files=sm.params.val,
        init_model=sm.params.init_model,
        run_dir=sm.params.run_dir,
    )
    logging.info("sft_%s complete: %s", sm.wildcards.which, done)

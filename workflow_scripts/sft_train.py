"""Snakemake script of rule sft_train: train (or import) sft_<which> and export it to results/runs/<run>/hf."""

import logging

from codegrpo.verl.stages import run_sft
from codegrpo.io import log_to
from codegrpo.workflow import failure_logged

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("sft_train failed"):
    done = run_sft(
        sm.params.cfg,
        sm.wildcards.which,
        train_files=sm.params.train,
        val_files=sm.params.val,
        init_model=sm.params.init_model,
        run_dir=sm.params.run_dir,
    )
    logging.info("sft_%s complete: %s", sm.wildcards.which, done)

"""Snakemake script of rules skeleton_rl_train / skin_rl_train: GRPO (or import) of the RL stage
``params.stage``, exported to results/runs/<stage>/hf (codegrpo.verl.stages.run_rl_stage)."""

import logging

from codegrpo.verl.stages import run_rl_stage
from codegrpo.io import log_to
from codegrpo.workflow import failure_logged

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
stage = sm.params.stage
with failure_logged("%s training failed", stage):
    done = run_rl_stage(
        sm.params.cfg,
        stage,
        train_files=sm.params.train,
        val_files=sm.params.val,
        init_model=sm.params.init_model,
        run_dir=sm.params.run_dir,
    )
    logging.info("%s complete: %s", stage, done)

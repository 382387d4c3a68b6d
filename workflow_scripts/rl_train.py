"""Snakemake script of rules skeleton_rl_train / skin_rl_train: GRPO (or import) of the RL stage
``params.stage``, exported to results/runs/<stage>/hf (codegrpo.verl.stages.run_rl_stage)."""

import logging

from codegrpo.verl.stages import run_rl_stage
from codegrpo.workflow import script_job

with script_job(snakemake, f"{snakemake.params.stage} training") as sm:  # noqa: F821  (injected by Snakemake)
    stage = sm.params.stage
    done = run_rl_stage(
        sm.params.cfg,
        stage,
        train_files=sm.params.train,
        val_files=sm.params.val,
        init_model=sm.params.init_model,
        run_dir=sm.params.run_dir,
    )
    logging.info("%s complete: %s", stage, done)

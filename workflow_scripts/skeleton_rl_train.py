"""Snakemake script of rule skeleton_rl_train: GRPO (or import) of skeleton_rl, exported to results/runs/skeleton_rl/hf."""

import logging

from codegrpo.verl.stages import run_rl_stage
from codegrpo.io import log_to

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
try:
    done = run_rl_stage(sm.params.cfg, "skeleton_rl", train_files=sm.params.train, val_files=sm.params.val,
                        init_model=sm.params.init_model, run_dir=sm.params.run_dir)
    logging.info("skeleton_rl complete: %s", done)
except Exception:
    logging.exception("skeleton_rl_train failed")
    raise

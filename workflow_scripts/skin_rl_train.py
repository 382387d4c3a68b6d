"""Snakemake script of rule skin_rl_train: GRPO (or import) of skin_rl, exported to results/runs/skin_rl/hf."""

import logging

from codegrpo.verl.stages import run_rl_stage
from codegrpo.io import log_to

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
try:
    done = run_rl_stage(sm.params.cfg, "skin_rl", train_files=sm.params.train, val_files=sm.params.val,
                        init_model=sm.params.init_model, run_dir=sm.params.run_dir, uses_embedding=True)
    logging.info("skin_rl complete: %s", done)
except Exception:
    logging.exception("skin_rl_train failed")
    raise

"""Snakemake script of rule skin_rl_train: GRPO (or import) of skin_rl, exported to results/runs/skin_rl/hf."""

import logging

from codegrpo.verl.stages import run_rl_stage

sm = snakemake  # noqa: F821  (injected by Snakemake)
logging.basicConfig(filename=sm.log[0], filemode="w", level=logging.INFO,
                    format="%(asctime)s %(levelname)s %(name)s: %(message)s")
try:
    done = run_rl_stage(sm.params.cfg, "skin_rl", train_files=sm.params.train, val_files=sm.params.val,
                        init_model=sm.params.init_model, run_dir=sm.params.run_dir, uses_embedding=True)
    logging.info("skin_rl complete: %s", done)
except Exception:
    logging.exception("skin_rl_train failed")
    raise

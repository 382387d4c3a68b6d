"""Snakemake script of rule dhrcl_train: GRPO run dhrcl-[<model>-]<variant>-seed<seed> on KodCode
(codegrpo.verl.dhrcl.run_dhrcl)."""

import logging

from codegrpo.verl.dhrcl import run_dhrcl
from codegrpo.io import log_to

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
try:
    done = run_dhrcl(sm.params.cfg, sm.params.variant, train_files=sm.input.train, val_files=sm.input.val,
                     init_model=sm.params.init_model, run_dir=sm.params.run_dir, seed=sm.params.seed,
                     model=sm.params.model)
    logging.info("%s complete: final step %s, curriculum transitions %s", sm.wildcards.run, done["final_step"],
                 done["transitions"])
except Exception:
    logging.exception("dhrcl_train failed")
    raise

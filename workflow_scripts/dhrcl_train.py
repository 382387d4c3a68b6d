"""Snakemake script of rule dhrcl_train: GRPO run dhrcl-[<model>-]<variant>-seed<seed> on KodCode
(codegrpo.verl.dhrcl.run_dhrcl)."""

import logging

from codegrpo.verl.dhrcl import run_dhrcl, with_reward_model
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    # dhrcl.reward_model.model: tiny -> the folder rule tiny_reward_model built
    cfg = with_reward_model(sm.params.cfg, sm.input.rm[0]) if sm.input.rm else sm.params.cfg
    done = run_dhrcl(
        cfg,
        sm.params.variant,
        train_files=sm.input.train,
        val_files=sm.input.val,
        init_model=sm.params.init_model,
        run_dir=sm.params.run_dir,
        seed=sm.params.seed,
        model=sm.params.model,
    )
    logging.info(
        "%s complete: final step %s, curriculum transitions %s",
        sm.wildcards.run,
        done["final_step"],
        done["transitions"],
    )

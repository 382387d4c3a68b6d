"""Snakemake script of rule learning_real_eval: held-out pass@1 and r_pass of one model (codegrpo.learning_real)."""

import logging

from codegrpo.learning_real import evaluate_model
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    r = evaluate_model(
        sm.params.model_dir,
        sm.input.heldout,
        sm.params.cfg,
        seed=int(sm.wildcards.seed),
        out_path=sm.output[0],
        label=f"{sm.wildcards.model} seed {sm.wildcards.seed}",
    )
    logging.info(
        "learning_real %s seed %s: pass@1 %.3f, mean r_pass %.3f",
        sm.wildcards.model,
        sm.wildcards.seed,
        r["pass@1"],
        r["r_pass"],
    )

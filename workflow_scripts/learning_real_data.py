"""Snakemake script of rule learning_real_data: the easy KodCode slice of learning_real (train / val / held out)."""

import logging

from codegrpo.learning_real import select_slice
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    rec = select_slice(sm.params.cfg, sm.params.out_dir)
    logging.info(
        "learning_real slice: %d train, %d val, %d held out (%d references failed their tests)",
        len(rec["train"]),
        len(rec["val"]),
        len(rec["heldout"]),
        len(rec["reference_failed"]),
    )

"""Snakemake script of rule eval_bringupbench: identifier quality of the shipped BringUpBench outputs."""

import logging
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from codegrpo.io import log_to  # noqa: E402
from codegrpo.eval.decompile import run_bringupbench_identifier  # noqa: E402

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
try:
    run_bringupbench_identifier(
        sm.input.data, sm.output[0], limit=sm.params.limit, embedding=sm.params.embedding,
        cfg=dict(sm.params.items()), embedding_log=sm.log.embedding,
    )
except Exception:
    logging.exception("eval_bringupbench failed")
    raise

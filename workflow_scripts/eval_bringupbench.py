"""Snakemake script of rule eval_bringupbench: identifier quality of the shipped BringUpBench outputs."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from codegrpo.workflow import script_job  # noqa: E402
from codegrpo.eval.decompile import run_bringupbench_identifier  # noqa: E402

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    run_bringupbench_identifier(
        sm.input.data,
        sm.output[0],
        limit=sm.params.limit,
        embedding=sm.params.embedding,
        cfg=dict(sm.params.items()),
        embedding_log=sm.log.embedding,
    )

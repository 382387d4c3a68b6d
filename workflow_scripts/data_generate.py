"""Snakemake script of rule data_generate: SK2Decompile training files from (pseudo-code, source) pairs."""

import os

from codegrpo.data.generate import generate_from_config
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    generate_from_config(
        sm.params.generate,
        normalize_cfg=sm.params.normalize,
        headers_cfg=sm.params.headers,
        seed=sm.params.seed,
        out_dir=os.path.dirname(sm.output.summary),
        html_path=sm.output.steps,
        workers=sm.threads,
    )

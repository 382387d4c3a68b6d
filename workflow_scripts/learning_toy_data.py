"""Snakemake script of rule learning_toy_data: the toy task's parquet files and its tiny model."""

import logging

from codegrpo import learning
from codegrpo.io import log_to
from codegrpo.models import build_tiny_model

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
try:
    toy = sm.params.toy
    learning.write_toy_dataset(sm.params.out_dir, toy["n_train"], toy["n_val"], sm.params.seed)
    build_tiny_model(sm.output.tiny, learning.toy_corpus(sm.params.seed), vocab_size=toy["vocab_size"],
                     seed=sm.params.seed)
except Exception:
    logging.exception("learning_toy_data failed")
    raise

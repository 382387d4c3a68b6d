"""Snakemake script of rule learning_toy_data: the toy task's parquet files and its tiny model."""

from codegrpo import learning
from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.models import build_tiny_model

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("learning_toy_data failed"):
    toy = sm.params.toy
    learning.write_toy_dataset(sm.params.out_dir, toy["n_train"], toy["n_val"], sm.params.seed)
    build_tiny_model(
        sm.output.tiny, learning.toy_corpus(sm.params.seed), vocab_size=toy["vocab_size"], seed=sm.params.seed
    )

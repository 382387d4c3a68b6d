"""Snakemake script of rule learning_toy_data: the toy task's parquet files and its tiny model."""

from codegrpo import learning
from codegrpo.workflow import script_job
from codegrpo.models import build_tiny_model

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    toy = sm.params.toy
    learning.write_toy_dataset(sm.params.out_dir, toy["n_train"], toy["n_val"], sm.params.seed)
    build_tiny_model(
        sm.output.tiny, learning.toy_corpus(sm.params.seed), vocab_size=toy["vocab_size"], seed=sm.params.seed
    )

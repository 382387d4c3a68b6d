"""Snakemake script of rule tiny_model: the offline tiny model, its tokenizer trained on the run's own data."""

from codegrpo.models import build_tiny_model, corpus_from_parquet
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    texts = corpus_from_parquet(list(sm.input))
    tiny = sm.params.tiny
    build_tiny_model(
        sm.output[0],
        texts,
        arch=tiny["arch"],
        vocab_size=tiny["vocab_size"],
        seed=sm.params.seed,
        hidden_size=tiny["hidden_size"],
        num_layers=tiny["num_layers"],
        max_position_embeddings=tiny["max_position_embeddings"],
    )

"""Snakemake script of rule tiny_model: the offline tiny model, its tokenizer trained on the run's own data."""

from codegrpo.models import build_tiny_model, corpus_from_parquet
from codegrpo.io import log_to
from codegrpo.workflow import failure_logged

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("tiny_model failed"):
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

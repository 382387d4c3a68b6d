"""Snakemake script of rule tiny_reward_model: the offline tiny reward model (AceCodeRM's layout) of the DHRCL
reward-model variants when dhrcl.reward_model.model is tiny; its tokenizer trained on the KodCode slice."""

from codegrpo.workflow import script_job
from codegrpo.models import build_tiny_reward_model, corpus_from_parquet

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    tiny = sm.params.tiny
    build_tiny_reward_model(
        sm.output[0],
        corpus_from_parquet(list(sm.input)),
        vocab_size=tiny["vocab_size"],
        seed=sm.params.seed,
        hidden_size=tiny["hidden_size"],
        num_layers=tiny["num_layers"],
    )

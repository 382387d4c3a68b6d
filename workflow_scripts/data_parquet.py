"""Snakemake script of rule data_parquet: one stage's verl RL or SFT train/val parquet pair."""

from codegrpo.data.parquet import write_stage_parquets
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    write_stage_parquets(
        list(sm.input),
        stage=sm.wildcards.stage,
        role=sm.wildcards.role,
        train_path=sm.output.train,
        val_path=sm.output.val,
        val_fraction=sm.params.val_fraction,
        seed=sm.params.seed,
        skeleton_sft_prompt=sm.params.skeleton_sft_prompt,
    )

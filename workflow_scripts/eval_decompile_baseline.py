"""Snakemake script of rule eval_decompile_baseline: a row without a model (gold sanity, raw Ghidra / IDA) of a decompilation benchmark."""

from codegrpo.workflow import script_job
from codegrpo.eval.decompile import run_baseline

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    run_baseline(
        sm.wildcards.baseline,
        sm.params.data,
        sm.output[0],
        benchmark=sm.wildcards.benchmark,
        protocol=sm.params.protocol,
        cache_dir=sm.params.cache,
        levels=tuple(sm.params.levels),
        tasks_per_level=sm.params.tasks_per_level,
        workers=sm.threads,
        timeout=sm.params.timeout_s,
        sandbox_limits=sm.params.sandbox,
        cfg=dict(sm.params.items()),
    )

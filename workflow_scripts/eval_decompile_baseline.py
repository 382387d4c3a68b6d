"""Snakemake script of rule eval_decompile_baseline: a row without a model (gold sanity, raw Ghidra / IDA) of a decompilation benchmark."""

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.eval.decompile import run_baseline

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("eval_decompile_baseline failed"):
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

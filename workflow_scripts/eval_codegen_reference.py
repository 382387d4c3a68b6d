"""Snakemake script of rules eval_codegen_reference(_bcb): the reference-solution sanity row of a code benchmark."""

from codegrpo.workflow import script_job
from codegrpo.eval.codegen import run_reference

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    run_reference(
        sm.wildcards.benchmark,
        sm.output[0],
        kodcode_heldout=sm.input.get("data"),
        limit=sm.params.limit,
        workers=sm.threads,
        timeout=sm.params.timeout_s,
        sandbox_limits=sm.params.sandbox,
        cfg=dict(sm.params.items()),
        suites=sm.params.suites,
    )

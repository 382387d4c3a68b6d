"""Snakemake script of rules eval_codegen_reference(_bcb): the reference-solution sanity row of a code benchmark."""

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.eval.codegen import run_reference

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("eval_codegen_reference failed"):
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

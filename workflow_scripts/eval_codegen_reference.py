"""Snakemake script of rules eval_codegen_reference(_bcb): the reference-solution sanity row of a code benchmark."""

from codegrpo.workflow import codegen_scoring, script_job
from codegrpo.eval.codegen import run_reference

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    run_reference(sm.wildcards.benchmark, sm.output[0], kodcode_heldout=sm.input.get("data"), **codegen_scoring(sm))

"""Snakemake script of rule eval_codegen_bcb: score a run's BigCodeBench samples (written by eval_codegen) in the
sandbox with the benchmark's libraries, one result per benchmark."""

from types import SimpleNamespace

from codegrpo.workflow import codegen_scoring, script_job
from codegrpo.eval.codegen_runs import score_samples_files

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    p = sm.params
    settings = SimpleNamespace(n=p.n_samples, temperature=p.temperature, top_p=p.top_p, max_new_tokens=p.max_new_tokens)
    score_samples_files(
        sm.wildcards.run,
        sm.input.model,
        {b: sm.input[f"{b}_samples"] for b in p.benchmarks},
        {b: sm.output[b] for b in p.benchmarks},
        settings=settings,
        ks=p.ks,
        **codegen_scoring(sm),
    )

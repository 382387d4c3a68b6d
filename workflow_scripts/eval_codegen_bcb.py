"""Snakemake script of rule eval_codegen_bcb: score a run's BigCodeBench samples (from eval_codegen_samples) in
the sandbox with the benchmark's libraries."""

import logging
from types import SimpleNamespace

from codegrpo.io import log_to
from codegrpo.eval.codegen import run_model

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
p = sm.params
try:
    settings = SimpleNamespace(n=p.n_samples, temperature=p.temperature, top_p=p.top_p,
                               max_new_tokens=p.max_new_tokens)
    run_model(
        sm.wildcards.run,
        sm.input.model,
        sm.wildcards.benchmark,
        sm.output[0],
        settings=settings,
        limit=p.limit,
        ks=p.ks,
        workers=sm.threads,
        timeout=p.timeout_s,
        sandbox_limits=p.sandbox,
        cfg=dict(p.items()),
        suites=p.suites,
        samples_path=sm.input.samples,
    )
except Exception:
    logging.exception("eval_codegen_bcb failed")
    raise

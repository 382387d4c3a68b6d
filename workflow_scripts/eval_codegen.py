"""Snakemake script of rule eval_codegen: sample a DHRCL run's model on one benchmark and score pass@k."""

import logging
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from codegrpo.io import log_to  # noqa: E402
from codegrpo.eval.codegen import run_model  # noqa: E402
from codegrpo.eval.generate import GenerationSettings  # noqa: E402

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
p = sm.params
try:
    settings = GenerationSettings.from_params(p)
    run_model(
        sm.wildcards.run,
        sm.input.model,
        sm.wildcards.benchmark,
        sm.output[0],
        settings=settings,
        backend=p.backend,
        kodcode_heldout=sm.input.get("data"),
        limit=p.limit,
        ks=p.ks,
        workers=sm.threads,
        timeout=p.timeout_s,
        sandbox_limits=p.sandbox,
        cfg=dict(p.items()),
        suites=p.suites,
    )
except Exception:
    logging.exception("eval_codegen failed")
    raise

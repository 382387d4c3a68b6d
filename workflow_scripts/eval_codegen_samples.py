"""Snakemake script of rule eval_codegen_samples: sample a DHRCL run's model on a BigCodeBench benchmark (scored
by rule eval_codegen_bcb in the benchmark's own environment)."""

import logging
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from codegrpo.io import log_to  # noqa: E402
from codegrpo.eval.codegen import run_generate  # noqa: E402
from codegrpo.eval.generate import GenerationSettings  # noqa: E402

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
p = sm.params
try:
    settings = GenerationSettings.from_params(p)
    run_generate(sm.wildcards.run, sm.input.model, sm.wildcards.benchmark, sm.output[0], settings=settings,
                 backend=p.backend, limit=p.limit, suites=p.suites)
except Exception:
    logging.exception("eval_codegen_samples failed")
    raise

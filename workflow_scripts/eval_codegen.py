"""Snakemake script of rule eval_codegen: one DHRCL run's model on every code-generation benchmark, with one model
load. Benchmarks in ``params.scored`` are sampled and scored here; those in ``params.sampled`` (BigCodeBench) are
only sampled, into the temporary samples files that rule eval_codegen_bcb scores."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from codegrpo.workflow import codegen_scoring, script_job  # noqa: E402
from codegrpo.eval.codegen_runs import run_model_benchmarks  # noqa: E402
from codegrpo.eval.generate import GenerationSettings  # noqa: E402

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    p = sm.params
    run_model_benchmarks(
        sm.wildcards.run,
        sm.input.model,
        {b: sm.output[b] for b in p.scored},
        {b: sm.output[f"{b}_samples"] for b in p.sampled},
        settings=GenerationSettings.from_params(p),
        backend=p.backend,
        kodcode_heldout=sm.input.get("kodcode_heldout_data"),
        ks=p.ks,
        **codegen_scoring(sm),
    )

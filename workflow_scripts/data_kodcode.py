"""Snakemake script of rule data_kodcode: KodCode train / val / held-out slices for DHRCL."""

import os

from codegrpo.data.kodcode import prepare_kodcode
from codegrpo.sandbox import make_sandbox
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    kod = sm.params.kodcode
    sandbox = None
    if kod["verify_solutions"]:
        sandbox = make_sandbox(min(sm.params.sandbox.get("workers") or sm.threads, sm.threads), sm.params.sandbox)
    try:
        prepare_kodcode(
            list(kod["paths"]),
            out_dir=os.path.dirname(sm.output.train),
            val_fraction=sm.params.val_fraction,
            heldout_fraction=sm.params.heldout_fraction,
            seed=sm.params.seed,
            on_bad_record=sm.params.on_bad_record,
            max_line_bytes=sm.params.max_line_bytes,
            source=kod["source"],
            subsets=kod["subsets"],
            gpt_difficulty=kod["gpt_difficulty"],
            max_benchmark_similarity=kod["max_benchmark_similarity"],
            decontaminate=kod["decontaminate"],
            decontaminate_ngram=kod["decontaminate_ngram"],
            verify_solutions=kod["verify_solutions"],
            verify_timeout=kod["verify_timeout"],
            sandbox=sandbox,
        )
    finally:
        if sandbox is not None:
            sandbox.close()

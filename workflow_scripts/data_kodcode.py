"""Snakemake script of rule data_kodcode: KodCode train / val / held-out slices for DHRCL."""

import os

from codegrpo.data.kodcode import prepare_kodcode
from codegrpo.sandbox import make_sandbox
from codegrpo.workflow import script_job

# prepare_kodcode's keyword arguments named as the rule's params and as the keys of data.kodcode
PARAMS = ("val_fraction", "heldout_fraction", "seed", "on_bad_record", "max_line_bytes")
KODCODE_KEYS = ("source", "subsets", "gpt_difficulty", "max_benchmark_similarity", "decontaminate")
KODCODE_KEYS += ("decontaminate_ngram", "verify_solutions", "verify_timeout")

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    kod = sm.params.kodcode
    sandbox = None
    if kod["verify_solutions"]:
        sandbox = make_sandbox(min(sm.params.sandbox.get("workers") or sm.threads, sm.threads), sm.params.sandbox)
    try:
        prepare_kodcode(
            list(kod["paths"]),
            out_dir=os.path.dirname(sm.output.train),
            sandbox=sandbox,
            **{k: getattr(sm.params, k) for k in PARAMS},
            **{k: kod[k] for k in KODCODE_KEYS},
        )
    finally:
        if sandbox is not None:
            sandbox.close()

"""Snakemake script of rule learning_real_report: report.md, summary.json and the per-step curves."""

import json
import logging
import os

from codegrpo.io import write_json
from codegrpo.learning_real_report import summarize, write_report
from codegrpo.workflow import script_job

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)

    def load(path):
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)

    after = {v: load(p) for v, p in zip(sm.params.variants, sm.input.after)}
    noise_runs = {r: load(p) for r, p in zip(sm.params.noise_runs, sm.input.noise_after)}
    run_dirs = {
        v: os.path.dirname(p)
        for v, p in zip([*sm.params.variants, *sm.params.noise_runs], [*sm.input.done, *sm.input.noise_done])
    }
    summary = summarize(
        [load(p) for p in sm.input.base],
        after,
        run_dirs,
        load(sm.input.slice),
        noise_runs=noise_runs,
        train_seed=int(sm.params.train_seed),
    )
    write_json(sm.output.summary, summary)
    write_report(summary, sm.output.md, sm.output.curves, sm.params.settings)
    for v, s in summary["variants"].items():
        logging.info("%s: pass@1 %+.3f (threshold %.3f): %s", v, s["delta_pass@1"], s["threshold"], s["verdict"])

"""Snakemake script of rule learning_report: the learning-check page; fails when a check failed."""

import json
import logging

from codegrpo.workflow import script_job
from codegrpo.learning import write_report

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    directions = {}
    for check, path in zip(sm.params.checks, sm.input.directions):
        with open(path, encoding="utf-8") as fh:
            directions[check] = json.load(fh)
    with open(sm.input.curriculum, encoding="utf-8") as fh:
        curriculum = json.load(fh)
    ok = write_report(directions, curriculum, sm.output.md, sm.output.rewards, sm.output.timeline)
    with open(sm.output.md, encoding="utf-8") as fh:
        logging.info("%s", fh.read())
    if not ok:
        raise SystemExit(f"learning check failed: see {sm.output.md} (in the log above)")

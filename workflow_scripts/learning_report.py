"""Snakemake script of rule learning_report: the learning-check page; fails when a check failed."""

import json
import logging

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.learning import write_report

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
with failure_logged("learning_report failed"):
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

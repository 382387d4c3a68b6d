"""Snakemake script of rule smoke: the cluster smoke checks (codegrpo.smoke), report in results/smoke/."""

import logging

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged
from codegrpo.smoke import plan_checks, run_smoke

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
p = sm.params
with failure_logged("smoke failed"):
    checks = plan_checks(p.cfg, decompile_data=sm.input.decompile, out_dir=p.out_dir, logs_dir=p.logs_dir)
    report = run_smoke(checks, p.out_dir, sm.output.report, sm.output.json)
    s = report["summary"]
    logging.info("smoke: %d ok, %d failed in %.0f s; report %s", s["ok"], s["failed"], s["total_s"], sm.output.report)

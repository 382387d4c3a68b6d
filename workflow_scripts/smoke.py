"""Snakemake script of rule smoke: the cluster smoke checks (codegrpo.smoke), report in results/smoke/."""

import logging

from codegrpo.workflow import script_job
from codegrpo.smoke import plan_checks, run_smoke

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    p = sm.params
    checks = plan_checks(p.cfg, decompile_data=sm.input.decompile, out_dir=p.out_dir, logs_dir=p.logs_dir)
    report = run_smoke(checks, p.out_dir, sm.output.report, sm.output.json)
    s = report["summary"]
    logging.info("smoke: %d ok, %d failed in %.0f s; report %s", s["ok"], s["failed"], s["total_s"], sm.output.report)

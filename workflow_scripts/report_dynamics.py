"""Snakemake script of rule report_dynamics: the DHRCL runs' degenerate-group chart and the efficiency table."""

import logging
import os

from codegrpo import dynamics
from codegrpo.workflow import script_job
from codegrpo.tables import table_efficiency, write_table

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    paths = dict(zip(sm.params.runs, sm.params.metrics))
    eff = sm.params.efficiency
    drawn = dynamics.plot_degenerate(dynamics.read_runs(paths), sm.output.chart)
    table = table_efficiency(paths, eff["grpo_variant"], float(eff["fraction"]), eff["metric"])
    write_table(table, os.path.dirname(sm.output.md))
    logging.info("dynamics: %d runs, %d curves, %d table rows", len(paths), drawn, len(table.rows))

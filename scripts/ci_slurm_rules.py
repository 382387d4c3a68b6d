"""Rules that must run as SLURM jobs in a rehearsal: those of a dry run's job table, less the Snakefile's localrules.

python scripts/ci_slurm_rules.py Snakefile plan.out      # plan.out: `snakemake -n --quiet rules` output
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def main(snakefile: str, plan: str) -> int:
    text = Path(snakefile).read_text()
    if "localrules:" not in text:
        raise SystemExit(f"{snakefile}: no localrules: block")
    block = text.split("localrules:", 1)[1]
    local = set()
    for line in block.splitlines()[1:]:
        m = re.fullmatch(r"\s+(\w+),?\s*", line)
        if not m:
            break
        local.add(m.group(1))
    table = Path(plan).read_text().split("\ntotal", 1)[0]
    rules = [m.group(1) for m in re.finditer(r"^(\w+)\s+\d+\s*$", table, re.M)]
    if not rules:
        raise SystemExit(f"{plan}: no job table (rule count lines) found")
    print(" ".join(dict.fromkeys(r for r in rules if r not in local)))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

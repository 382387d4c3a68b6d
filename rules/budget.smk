# Plan-time budget (codegrpo.budget, docs/budget.md): `snakemake budget` writes results/budget.{md,json} from the
# config and the training data's row counts (no job runs). It is rebuilt whenever the budget it would write
# changes (its params hold a fingerprint of it). Not part of `all`.
import hashlib as _hashlib
import json as _json

from codegrpo import budget as _budget


def _budget_fingerprint(wildcards):
    plan = _budget.build_budget(config)
    return _hashlib.sha256(_json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()[:16]


rule budget:
    output:
        md=res("budget.md"),
        json=res("budget.json"),
    params:
        fingerprint=_budget_fingerprint,
    log:
        logpath("budget", "budget.log"),
    script:
        "../workflow_scripts/budget.py"

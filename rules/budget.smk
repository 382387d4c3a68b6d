# Plan-time budget (codegrpo.budget, docs/budget.md): `snakemake budget` writes results/budget.{md,json} from the
# config and the training data's row counts (no job runs). It is rebuilt whenever the budget it would write
# changes (its params hold a fingerprint of it). Not part of `all`.
rule budget:
    output:
        md=res("budget.md"),
        json=res("budget.json"),
    log:
        logpath("budget", "budget.log"),
    conda:
        "../envs/data.yaml"
    params:
        fingerprint=budget_fingerprint,
    script:
        "../workflow_scripts/budget.py"

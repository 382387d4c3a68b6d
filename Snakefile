# codegrpo: raw JSONL -> header validation -> Parquet -> SFT -> Skeleton RL -> Skin RL -> DHRCL
#           -> evaluation -> paper tables.
# The local default (config.yaml) runs the whole DAG on CPU with a tiny model; config/paper.yaml is
# the paper-scale configuration selected by the SLURM profile.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "rules/common.smk"


rule all:
    default_target: True
    input:
        all_targets,


include: "rules/data.smk"
include: "rules/sft.smk"
include: "rules/rl.smk"
include: "rules/dhrcl.smk"
include: "rules/evaluate.smk"
include: "rules/tables.smk"
include: "rules/learning.smk"
include: "rules/cluster.smk"
include: "rules/budget.smk"


# Light rules (seconds on one CPU, no GPU) run on the submitting host under the SLURM profile instead of
# waiting in the queue; the stage target rules have no command and never become jobs.
localrules:
    all,
    budget,
    data,
    sft,
    skeleton_rl,
    skin_rl,
    dhrcl,
    evaluate,
    tables,
    tables_build,
    report_reexec,
    report_codegen,
    report_run,
    report_dynamics,
    learning_report,
    learning_check,

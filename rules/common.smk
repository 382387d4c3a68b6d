# Config validation (JSON schema, defaults filled in) and helpers shared by every stage.
import os

from snakemake.utils import validate

validate(config, schema="../schemas/config.schema.yaml")

RESULTS = config["results_dir"]
LOGS = config["logs_dir"]

# Each stage's .smk registers the files its named target rule builds; `all` asks for every one.
STAGE_TARGETS = {}


def register_targets(stage, files):
    STAGE_TARGETS.setdefault(stage, []).extend(files)
    return files


def all_targets(wildcards):
    return [f for files in STAGE_TARGETS.values() for f in files]


def res(*parts):
    """A path under the results directory."""
    return os.path.join(RESULTS, *parts)


def logpath(*parts):
    """A path under the logs directory."""
    return os.path.join(LOGS, *parts)


def stage_resources(stage):
    """Resources of a stage's jobs from config['cluster'] (defaults merged with the stage's overrides).

    Use in a rule as ``resources: **stage_resources("sft")``. Locally these are only scheduling hints;
    the SLURM executor maps them to sbatch flags (mem_mb, runtime, cpus_per_task, gpu, nodes).
    """
    cl = config["cluster"]
    out = dict(cl["default_resources"])
    out.update(cl["stages"].get(stage, {}))
    if config["device"] == "cpu" or not out.get("gpu"):
        out.pop("gpu", None)
    elif cl.get("gpu_model"):
        out["gpu_model"] = cl["gpu_model"]
    if cl.get("partition"):
        out["slurm_partition"] = cl["partition"]
    if cl.get("account"):
        out["slurm_account"] = cl["account"]
    return out

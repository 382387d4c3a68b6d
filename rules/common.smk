# Config validation (JSON schema, defaults filled in) and helpers shared by every stage.
import os

from snakemake.utils import validate

from codegrpo import hub as _hub
from codegrpo import preflight as _preflight
from codegrpo.cluster.resources import stage_resources as _stage_resources
from codegrpo.cluster.resources import training_threads as _training_threads

validate(config, schema="../schemas/config.schema.yaml")

# Preflight (codegrpo.preflight): config consistency now, before any job is planned; the checks that depend
# on where jobs run (partition, offline models, wandb) when the default target is planned under SLURM.
_preflight.raise_problems(_preflight.check_topology(config))

# The Hugging Face cache and offline switches of every job (hub section; codegrpo.hub): set in this process,
# whose environment local jobs inherit and SLURM jobs receive (sbatch --export=ALL). Only the prefetch rule goes
# online (it drops the switches).
os.environ.update(_hub.job_env(config))

RESULTS = config["results_dir"]
LOGS = config["logs_dir"]

# Each stage's .smk registers the files its named target rule builds; `all` asks for every one.
STAGE_TARGETS = {}


def register_targets(stage, files):
    STAGE_TARGETS.setdefault(stage, []).extend(files)
    return files


def all_targets(wildcards):
    plugin = getattr(workflow, "executor_plugin", None)
    executor = getattr(plugin, "name", None)
    if executor == "slurm":
        _preflight.plan_checks(config, executor=executor)
    elif plugin is not None and not workflow.dryrun and config["hub"]["offline_jobs"]:
        # a real run elsewhere with offline jobs: every hub id must be cached (`snakemake prefetch`)
        _preflight.raise_problems(_preflight.check_offline(config, os.environ))
    return [f for files in STAGE_TARGETS.values() for f in files]


def res(*parts):
    """A path under the results directory."""
    return os.path.join(RESULTS, *parts)


def logpath(*parts):
    """A path under the logs directory."""
    return os.path.join(LOGS, *parts)


def stage_resources(stage):
    """Resources of a stage's jobs (codegrpo.cluster.resources); in a rule: ``**stage_resources("sft")``."""
    return _stage_resources(config, stage)


def training_threads():
    """``threads:`` of a training rule: 1 on CPU (what the job uses; two run side by side on 2 cores), 2 on GPUs
    (codegrpo.cluster.resources.training_threads)."""
    return _training_threads(config)

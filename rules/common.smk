# Config validation (JSON schema, defaults filled in) and helpers shared by every stage.
import os

from snakemake.utils import validate

from codegrpo import hub as _hub
from codegrpo import preflight as _preflight
from codegrpo.eval.protocols import apply_codegen_protocol as _apply_codegen_protocol
from codegrpo.cluster.resources import stage_resources as _stage_resources
from codegrpo.cluster.shape import check_jobs as _check_jobs
from codegrpo.cluster.resources import training_threads as _training_threads
from codegrpo.verl.cpu import PipelineRay as _PipelineRay

validate(config, schema="../schemas/config.schema.yaml")
# a named code-generation protocol (evaluate.codegen.protocol) replaces the sampling keys it sets
_apply_codegen_protocol(config)

# Preflight (codegrpo.preflight): config consistency now, like the schema above (a pure check: a dry run with an
# inconsistent config fails), before any job is planned; the checks that depend on where jobs run (partition,
# offline models, wandb) in `onstart` below, for every target of a real run.
_preflight.raise_problems(_preflight.check_topology(config))

RESULTS = config["results_dir"]
LOGS = config["logs_dir"]

# Each stage's .smk registers the files its named target rule builds; `all` asks for every one.
STAGE_TARGETS = {}


def register_targets(stage, files):
    STAGE_TARGETS.setdefault(stage, []).extend(files)
    return files


def all_targets(wildcards):
    return [f for files in STAGE_TARGETS.values() for f in files]


def preflight_before_jobs():
    """The plan's preflight, for every target and executor, once the DAG is known and before any job starts
    (``onstart``: real runs only, never in a dry run): under SLURM the checks of where jobs run (partition, offline
    models, wandb) when a job will be submitted; offline models for a local run with offline jobs. A plan whose
    jobs are all local rules (``prefetch``, tables, reports) submits nothing, and prefetch is what fills the cache.
    """
    executor = getattr(getattr(workflow, "executor_plugin", None), "name", None)
    jobs = list(workflow.dag.needrun_jobs())
    submitted = [j for j in jobs if not j.is_local]
    if executor == "slurm" and submitted:
        _preflight.plan_checks(config, executor=executor)
        # every job's request against the nodes sinfo reports (nothing to compare with where sinfo is missing)
        requests = [(j.rule.name, dict(j.resources.items())) for j in submitted]
        _preflight.raise_problems(_check_jobs(requests))
    elif config["hub"]["offline_jobs"] and any(j.rule.name != "prefetch" for j in jobs):
        # a real run elsewhere with offline jobs: every hub id must be cached (`snakemake prefetch`)
        _preflight.raise_problems(_preflight.check_offline(config, os.environ))


# One local Ray for every CPU training job of a local run (pipeline_ray; codegrpo.verl.cpu.PipelineRay): jobs
# inherit its RAY_ADDRESS from this process and join it instead of each starting a Ray of its own.
PIPELINE_RAY = _PipelineRay()
RAY_TRAINING_RULES = {
    "skeleton_rl_train",
    "skin_rl_train",
    "dhrcl_train",
    "learning_direction",
    "learning_curriculum",
}


def start_pipeline_ray():
    executor = getattr(getattr(workflow, "executor_plugin", None), "name", None)
    if executor != "local":
        return  # jobs on other nodes cannot join it (and workflow.cores is undefined there)
    n_train = sum(
        1 for j in workflow.dag.needrun_jobs() if j.rule.name in RAY_TRAINING_RULES
    )
    PIPELINE_RAY.start(
        enabled=config["pipeline_ray"],
        device=config["device"],
        executor=executor,
        n_training_jobs=n_train,
        cores=workflow.cores,
    )


def set_job_env():
    """The Hugging Face cache and offline switches of every job (hub section; codegrpo.hub), set in this process
    before any job starts (``onstart``): local jobs inherit its environment and SLURM jobs receive it (sbatch
    --export=ALL). Only the prefetch rule goes online (it drops the switches)."""
    os.environ.update(_hub.job_env(config))


onstart:
    set_job_env()
    preflight_before_jobs()
    start_pipeline_ray()


onsuccess:
    PIPELINE_RAY.stop()


onerror:
    PIPELINE_RAY.stop()


def res(*parts):
    """A path under the results directory."""
    return os.path.join(RESULTS, *parts)


def logpath(*parts):
    """A path under the logs directory."""
    return os.path.join(LOGS, *parts)


def stage_resources(stage):
    """Resources of a stage's jobs (codegrpo.cluster.resources); in a rule: ``**stage_resources("sft")``."""
    return _stage_resources(config, stage)


def budget_fingerprint(wildcards):
    """A hash of the plan-time budget (codegrpo.budget) that `snakemake budget` writes, as its params (so the
    budget file is rebuilt whenever the budget changes)."""
    import hashlib
    import json

    from codegrpo import budget

    plan = budget.build_budget(config)
    return hashlib.sha256(
        json.dumps(plan, sort_keys=True, default=str).encode()
    ).hexdigest()[:16]


def training_threads():
    """``threads:`` of a training rule: 1 on CPU (what the job uses; two run side by side on 2 cores), 2 on GPUs
    (codegrpo.cluster.resources.training_threads)."""
    return _training_threads(config)

# Helpers and input functions of every rule file, in one place (no helper file depends on another's include
# order): the Snakefile includes this file first. At parse time it only validates the config (JSON schema, the
# named code-generation protocol, codegrpo.preflight.check_topology, the local evaluation sets); the jobs'
# environment, the plan's preflight and the pipeline's Ray are set up in `onstart`.
#
# Sections: config validation | paths, stage targets, resources | onstart | training (sft, RL stages, DHRCL) |
# evaluation | tables and report.
import os
import re

from snakemake.utils import validate

from codegrpo import hub as _hub
from codegrpo import preflight as _preflight
from codegrpo.cluster.resources import stage_resources as _stage_resources
from codegrpo.cluster.resources import training_threads as _training_threads
from codegrpo.cluster.shape import check_jobs as _check_jobs
from codegrpo.eval.decompile import check_eval_set as _check_eval_set
from codegrpo.eval.decompile import metric_embedding_config as _metric_embedding_config
from codegrpo.eval.protocols import apply_codegen_protocol as _apply_codegen_protocol
from codegrpo.learning_real import run_names as learning_real_runs
from codegrpo.packaged import PACKAGED as PACKAGED_MODELS
from codegrpo.packaged import parse_ref as packaged_ref
from codegrpo.verl.cpu import PipelineRay as _PipelineRay
from codegrpo.verl.dhrcl import needs_tiny_reward_model
from codegrpo.verl.dhrcl import plan_runs as dhrcl_plan_runs
from codegrpo.verl.dhrcl import run_name as dhrcl_run
from codegrpo.verl.prompts import eval_uses_template as _eval_uses_template

# ==============================================================================================================
# Config validation (parse time; a dry run with an invalid or inconsistent config fails)
# ==============================================================================================================

validate(config, schema="../schemas/config.schema.yaml")
# a named code-generation protocol (evaluate.codegen.protocol) replaces the sampling keys it sets
_apply_codegen_protocol(config)

# Preflight (codegrpo.preflight): config consistency now, like the schema above (a pure check: a dry run with an
# inconsistent config fails), before any job is planned; the checks that depend on where jobs run (partition,
# offline models, wandb) in `onstart` below, for every target of a real run.
_preflight.raise_problems(_preflight.check_topology(config))


# ==============================================================================================================
# Paths, stage targets and job resources
# ==============================================================================================================

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


# ==============================================================================================================
# onstart: the jobs' environment, the plan's preflight, the pipeline's Ray
# ==============================================================================================================


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


# ==============================================================================================================
# Training: config slices, model references, runs (sft, skeleton_rl, skin_rl, dhrcl)
# A training run's exported model is its hf/ folder, declared as `directory` output by the rule that trains it
# (sft_train, skeleton_rl_train, skin_rl_train, dhrcl_train) and as input `init` by the rule that trains from it;
# evaluation rules take it as input the same way. A job reads the folder it starts from in its input
# (init_model), never from a path rebuilt in params.
# ==============================================================================================================


def training_cfg(*sections):
    """The parts of the config a training job needs (the library takes a plain dict)."""
    out = {
        "device": config["device"],
        "seed": config["seed"],
        "cluster": config["cluster"],
        "model": config["model"],
    }
    out.update({s: config[s] for s in sections})
    return out


def model_ref_input(ref):
    """Input that provides model reference ``ref``: the tiny model folder (``tiny``), a packaged model's folder
    (``packaged:<name>``, rule packaged_model), or nothing for a hub id / local folder.
    """
    if ref == "tiny":
        return [res("models", "tiny")]
    name = packaged_ref(ref)
    return [res("models", name)] if name else []


def model_ref_path(ref):
    """The folder (or hub id) a model reference stands for (see model_ref_input)."""
    found = model_ref_input(ref)
    return found[0] if found else ref


def base_model_input():
    """Input that provides model.base (model_ref_input)."""
    return model_ref_input(config["model"]["base"])


def base_model_path():
    return model_ref_path(config["model"]["base"])


def run_hf(run):
    """A training run's exported model folder (the `hf` directory output of the rule that trains it)."""
    return res("runs", run, "hf")


def run_done(run):
    """A training run's completion record (written last; the stage target rules ask for it)."""
    return res("runs", run, "done.json")


def init_model(fallback):
    """``params.init_model`` of a training rule: the model its job starts from. That is the folder the rule
    declares as input ``init`` (a model folder a rule builds, or the hf/ folder of the run it continues); without
    one, ``fallback(wildcards)``: a hub id or a folder outside the workflow, or, for a stage that imports a
    checkpoint instead of training (no init input), the model it would start from, recorded in done.json.
    """

    def param(wildcards, input):
        declared = input.get("init")
        if isinstance(declared, str):
            return declared
        if declared:
            return declared[0]
        return fallback(wildcards)

    return param


# ---- sft: sft_skeleton from model.base, sft_skin from model.base or a run (sft.skin_init)
SFT_INIT = {
    "skeleton": "base",
    "skin": config["sft"]["skin_init"],
}


def sft_imported(which):
    return bool(config["sft"]["import"].get(which))


def sft_inputs(wildcards):
    which = wildcards.which
    if sft_imported(which):
        return {}
    out = {
        "train": res("data", "sft", f"{which}.train.parquet"),
        "val": res("data", "sft", f"{which}.val.parquet"),
    }
    init = SFT_INIT[which]
    if init == "base":
        out["init"] = base_model_input()
    else:
        out["init"] = run_hf(init)
    return out


def sft_init_model(wildcards):
    """What sft_<which> starts from when it declares no model folder as input (see init_model)."""
    init = SFT_INIT[wildcards.which]
    return base_model_path() if init == "base" else run_hf(init)


# ---- RL stages (rules/rl.smk)
# stage -> (RL data of, run it starts from, config sections its reward reads)
RL_STAGES = {
    "skeleton_rl": ("skeleton", "sft_skeleton", ("compile_reward",)),
    "skin_rl": ("skin", "sft_skin", ("embedding", "compile_reward")),
}


def rl_inputs(stage, data_stage, init_run):
    """Input function of an RL stage: its RL parquet pair and the model folder (hf/) of the run it starts from
    (nothing when the stage imports a checkpoint instead of training)."""

    def inputs(wildcards):
        if config[stage]["import"]:
            return {}
        return {
            "train": res("data", "rl", f"{data_stage}.train.parquet"),
            "val": res("data", "rl", f"{data_stage}.val.parquet"),
            "init": run_hf(init_run),
        }

    return inputs


def rl_params(stage):
    data_stage, init_run, sections = RL_STAGES[stage]
    return {
        "stage": stage,
        "cfg": training_cfg(stage, *sections),
        "train": res("data", "rl", f"{data_stage}.train.parquet"),
        "val": res("data", "rl", f"{data_stage}.val.parquet"),
        "init_model": init_model(lambda w: run_hf(init_run)),
        "run_dir": lambda w, output: os.path.dirname(output.done),
    }


# ---- DHRCL runs (rules/dhrcl.smk)
# every run: name -> variant, seed, model (of dhrcl.models, or None) and the model it starts from (init: base =
# model.base, the tiny model folder on CPU, or a hub id / folder)
DHRCL_PLAN = dhrcl_plan_runs(config)


def dhrcl_runs(seeds=None):
    """DHRCL run names (dhrcl-<variant>-seed<seed>) of every configured variant at the given seeds (default:
    every seed of dhrcl.seeds)."""
    return list(dhrcl_plan_runs(config, seeds))


def dhrcl_reward_model_input(run):
    """The tiny reward model folder when run's variant scores with dhrcl.reward_model.model: tiny, else nothing."""
    tiny = needs_tiny_reward_model(config["dhrcl"], DHRCL_PLAN[run]["variant"])
    return [res("models", "tiny_rm")] if tiny else []


def dhrcl_init_input(run):
    """Input that provides a DHRCL run's init model (model.base for init: base, else its own reference)."""
    init = DHRCL_PLAN[run]["init"]
    return base_model_input() if init == "base" else model_ref_input(init)


def dhrcl_init_path(run):
    """The folder or hub id a DHRCL run starts from (dhrcl_init_input's folder, else the hub id)."""
    init = DHRCL_PLAN[run]["init"]
    return base_model_path() if init == "base" else model_ref_path(init)


# ==============================================================================================================
# Evaluation (rules/evaluate.smk)
# ==============================================================================================================

EVAL = config["evaluate"]
EVAL_DEC = EVAL["decompile"]
EVAL_GEN = EVAL["codegen"]
EVAL_SYSTEMS = {s["name"]: s for s in EVAL_DEC["systems"]}
# DHRCL runs: the configured list, or every run of the dhrcl section at every seed (dhrcl_runs).
EVAL_GEN_RUNS = EVAL_GEN["runs"] if EVAL_GEN["runs"] is not None else dhrcl_runs()
# Sandbox limits of evaluation jobs: the project's sandbox section with the evaluate overrides.
EVAL_SANDBOX = {**config.get("sandbox", {}), **EVAL["sandbox"]}
# SK2Decompile benchmarks: result name -> evaluation set (path or URL), re-executability protocol, rows that
# need no model. One result per system and benchmark: results/eval/<system>/<benchmark>.json.
DEC_BENCHMARKS = {
    "humaneval_decompile": {
        k: EVAL_DEC[k] for k in ("data", "protocol", "input_field", "baselines")
    },
}
if EVAL_DEC["mbpp"]["enabled"]:
    DEC_BENCHMARKS["mbpp_decompile"] = {
        k: EVAL_DEC["mbpp"][k] for k in ("data", "protocol", "input_field", "baselines")
    }
# Plan time: a local evaluation file without the model input field its protocol reads, or a configured level
# without tasks, stops the plan with the file, field and config section named (a URL is checked by its job,
# before any model loads).
for _bench, _spec in DEC_BENCHMARKS.items():
    _check_eval_set(
        _spec["data"],
        _spec["protocol"],
        _spec["input_field"],
        EVAL_DEC["levels"],
        what="evaluate.decompile"
        + (".mbpp" if _bench == "mbpp_decompile" else "")
        + f" ({_bench})",
    )
DEC_BASELINES = sorted(
    {b for bench in DEC_BENCHMARKS.values() for b in bench["baselines"]}
)
# evaluation sets given as URLs: the run's URL cache (<HF_HOME>/codegrpo-urls, $CODEGRPO_URL_CACHE), filled by
# `snakemake prefetch` (offline jobs read it there) or, online, by the first job that needs them
EVAL_CACHE = None
# Embedding of the identifier metric: the configured `embedding` section (the reward's model) with the
# evaluate.decompile.embedding overrides. A served model on a GPU node (vLLM's server) needs the GPU and the
# training environment; otherwise scoring needs neither.
EVAL_EMBEDDING = _metric_embedding_config(config)
EVAL_EMBEDDING_ON_GPU = bool(
    EVAL_EMBEDDING.get("serve")
    and EVAL_EMBEDDING.get("server_command")
    and config["device"] != "cpu"
)


def eval_alternatives(names):
    """A wildcard regex matching exactly the given names (nothing when the list is empty)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


def dec_data_input(wildcards):
    """A decompilation benchmark's evaluation set as job input ({} for a URL: the job downloads it)."""
    src = DEC_BENCHMARKS[wildcards.benchmark]["data"]
    return {} if src.startswith(("http://", "https://")) else {"data": src}


def eval_cpu_resources():
    """The evaluate stage's resources without a GPU (rows that only compile and run programs)."""
    return {
        k: v
        for k, v in stage_resources("evaluate").items()
        if k not in ("gpu", "gpu_model")
    }


def identifier_resources():
    """Resources of a job that scores identifiers: the GPU only when it serves the embedding model there."""
    return (
        stage_resources("evaluate") if EVAL_EMBEDDING_ON_GPU else eval_cpu_resources()
    )


def eval_targets():
    files = [
        res("eval", name, f"{bench}.json")
        for bench, spec in DEC_BENCHMARKS.items()
        for name in spec["baselines"] + list(EVAL_SYSTEMS)
    ]
    if EVAL_DEC["bringupbench"]["enabled"]:
        files.append(res("eval", "bringupbench", "identifier.json"))
    files += [
        res("eval", run, f"{b}.json")
        for run in EVAL_GEN_RUNS
        for b in EVAL_GEN["benchmarks"]
    ]
    if EVAL_GEN["reference"]:
        files += [res("eval", "reference", f"{b}.json") for b in reference_benchmarks()]
    return files


# The paper's BigCodeBench tasks import many libraries: they are scored in envs/bigcodebench.yaml.
BCB_BENCHMARKS = [b for b in EVAL_GEN["benchmarks"] if b.startswith("bigcodebench_")]
OTHER_BENCHMARKS = [b for b in EVAL_GEN["benchmarks"] if b not in BCB_BENCHMARKS]


def reference_benchmarks():
    """Benchmarks with a reference-solution sanity row (LiveCodeBench only with configured solutions)."""
    return [
        b
        for b in EVAL_GEN["benchmarks"]
        if b != "livecodebench" or EVAL_GEN["livecodebench"]["solutions"]
    ]


def benchmark_data_files(benchmark):
    """Local data files of a benchmark (rerun when they change); URLs and hub ids are fetched by the job."""
    if benchmark == "kodcode_heldout":
        return {"data": res("data", "kodcode", "heldout.parquet")}
    section = EVAL_GEN.get(benchmark) or {}
    out = {}
    for key in ("source", "solutions"):
        path = section.get(key)
        if path and os.path.exists(path):
            out[f"suite_{key}"] = path
    return out


def codegen_data(wildcards):
    """Input of a job of one benchmark (wildcard {benchmark}): its local data files."""
    return benchmark_data_files(wildcards.benchmark)


def codegen_run_data(benchmarks):
    """Input of a job of several benchmarks: their local data files, as <benchmark>_<key> (the held-out KodCode
    parquet: kodcode_heldout_data)."""
    return {
        f"{b}_{key}": path
        for b in benchmarks
        for key, path in benchmark_data_files(b).items()
    }


def codegen_result_files(run, benchmarks):
    """A run's result JSON per benchmark, keyed by benchmark (output names of eval_codegen / eval_codegen_bcb)."""
    return {b: res("eval", run, f"{b}.json") for b in benchmarks}


def codegen_samples_files(run):
    """A run's BigCodeBench samples JSON per benchmark, keyed <benchmark>_samples: written by eval_codegen, scored
    by eval_codegen_bcb."""
    return {
        f"{b}_samples": res("eval", run, f"{b}.samples.json") for b in BCB_BENCHMARKS
    }


# ==============================================================================================================
# Tables and report (rules/tables.smk)
# ==============================================================================================================

TABLES = config["tables"]
TABLE_NAMES = ("reexec", "ablation", "dhrcl", "identifier")
TABLE_FORMATS = ("md", "csv", "tex")


def report_runs():
    """Training runs plotted in the report: the configured list, or the runs behind what is evaluated."""
    if TABLES["report_runs"] is not None:
        return list(TABLES["report_runs"])
    runs = []
    for system in EVAL_SYSTEMS.values():
        for run in (system["skeleton"], system.get("skin")):
            if run and run not in runs:
                runs.append(run)
    return runs + [r for r in EVAL_GEN_RUNS if r not in runs]


def dynamics_runs():
    """The DHRCL runs among the report's runs: the degenerate-group chart and the efficiency table."""
    planned = set(dhrcl_runs())
    return [r for r in report_runs() if r in planned]


def eval_decompile_files():
    return [
        f
        for f in eval_targets()
        if os.path.basename(f)[: -len(".json")] in DEC_BENCHMARKS
    ]


def eval_codegen_files():
    return [
        f
        for f in eval_targets()
        if os.path.basename(f)[: -len(".json")] in EVAL_GEN["benchmarks"]
    ]

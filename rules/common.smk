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

    In a rule's resources directive: ``**stage_resources("sft")``. Locally these are only scheduling hints;
    the SLURM executor maps them to sbatch flags (docs/cluster.md): mem_mb -> --mem (per node),
    runtime -> -t, cpus_per_task -> --cpus-per-task, nodes -> --nodes, partition/account/qos -> -p/-A/--qos.
    GPUs (config value per node; none with device cpu): on one node ``gpu``(+``gpu_model``) -> --gpus=N;
    on several nodes ``gres`` -> --gres=gpu[:model]:N, which is per node (the plugin's --gpus is a job
    total, and its job step would ask for all of them on the first node).
    With device gpu, a training stage's nnodes / n_gpus_per_node (its own section, or its `training`
    subsection) set nodes / gpu, so verl and SLURM agree; a different cluster.stages value is an error.
    """
    cl = config["cluster"]
    out = dict(cl["default_resources"])
    explicit = cl["stages"].get(stage, {})
    out.update(explicit)
    if config["device"] != "cpu":
        # A training stage's own nnodes / n_gpus_per_node (what verl is told) size its allocation too.
        section = config.get(stage) if isinstance(config.get(stage), dict) else {}
        section = (
            section.get("training", section) if "nnodes" not in section else section
        )
        for res_key, key in (("nodes", "nnodes"), ("gpu", "n_gpus_per_node")):
            if isinstance(section, dict) and key in section:
                if res_key in explicit and explicit[res_key] != section[key]:
                    raise ValueError(
                        f"config: cluster.stages.{stage}.{res_key} = {explicit[res_key]} but the "
                        f"{stage} section says {key} = {section[key]}; set them equal"
                    )
                out[res_key] = section[key]
    gpus = out.pop("gpu", 0)
    if config["device"] == "cpu":
        gpus = 0
    model = cl.get("gpu_model")
    if gpus and out.get("nodes", 1) > 1:
        out["gres"] = f"gpu:{model}:{gpus}" if model else f"gpu:{gpus}"
    elif gpus:
        out["gpu"] = gpus
        if model:
            out["gpu_model"] = model
    for key, flag in (
        ("partition", "slurm_partition"),
        ("account", "slurm_account"),
        ("qos", "qos"),
    ):
        if cl.get(key):
            out[flag] = cl[key]
    extra = " ".join(
        x for x in (cl.get("slurm_extra"), out.pop("slurm_extra", None)) if x
    )
    if extra:
        out["slurm_extra"] = extra
    return out

"""Resources of a stage's jobs, from the validated config (what a rule's ``resources:`` directive gets).

``stage_resources(config, stage)`` merges ``cluster.default_resources`` with ``cluster.stages.<stage>`` and
turns GPUs into what the SLURM executor plugin understands (docs/cluster.md):

* mem_mb -> --mem (per node), runtime -> -t, cpus_per_task -> --cpus-per-task, nodes -> --nodes,
  partition/account/qos -> -p/-A/--qos (a stage's own partition / qos first; jobs without GPUs go to
  ``cluster.cpu_partition`` when set), ``exclusive`` -> --exclusive (per stage only: in the site-wide
  ``cluster.slurm_extra`` it would give every CPU job a whole node, a :class:`ResourceError`), slurm_extra
  appended verbatim;
* GPUs per node (none with device cpu): on one node ``gpu`` (+``gpu_model``) -> --gpus=N; on several nodes
  ``gres`` -> --gres=gpu[:model]:N, which is per node (the plugin's --gpus is a job total, and its job step
  would ask for all of them on the first node); every GPU job also gets ``tasks_per_gpu: 0`` (no
  --ntasks-per-gpu: one task per node, see :func:`stage_resources`).

GPU topology is stated in one place. A training stage (a config section with ``nnodes`` /
``n_gpus_per_node``, itself or in its ``training`` subsection: sft, skeleton_rl, skin_rl, dhrcl) takes its
nodes and GPUs per node from that section, which is also what verl is told; ``cluster.stages.<stage>``
may not repeat them (:class:`ResourceError` names the key to delete). Other stages (evaluate, data ...)
take ``gpu`` / ``nodes`` from ``cluster``.

One-host rehearsal (``cluster.rehearsal_tasks_as_nodes``, device cpu only): a training stage with
``nnodes`` > 1 gets ``tasks: nnodes`` (--ntasks) on one node instead, each task a Ray node.
"""

from __future__ import annotations

__all__ = [
    "ResourceError",
    "header_threads",
    "rehearsal_tasks",
    "stage_resources",
    "training_threads",
    "training_topology",
]

#: threads a training job (SFT, GRPO, DHRCL, the learning checks) declares with ``device: cpu``: what it really
#: uses. The tiny model's trainer keeps about one core busy (Ray, the rollout loop and verl's bookkeeping are
#: serial Python), so two independent training jobs share 2 cores instead of running one after the other.
#: Snakemake hands a job its threads as OMP_NUM_THREADS / MKL_NUM_THREADS, which torch's intra-op pool (and
#: every Ray worker of the run, which inherits the job's environment) follows.
CPU_TRAINING_THREADS = 1
#: what a training job declared before (and still declares on GPUs: data loading and tokenisation threads)
GPU_TRAINING_THREADS = 2


class ResourceError(ValueError):
    """The config states a stage's resources inconsistently."""


def _training_section(config: dict, stage: str) -> tuple[str, dict] | None:
    """(config path, section) holding the stage's nnodes / n_gpus_per_node, or None for other stages."""
    section = config.get(stage)
    if not isinstance(section, dict):
        return None
    if "nnodes" in section or "n_gpus_per_node" in section:
        return stage, section
    sub = section.get("training")
    if isinstance(sub, dict) and ("nnodes" in sub or "n_gpus_per_node" in sub):
        return f"{stage}.training", sub
    return None


def training_topology(config: dict, stage: str) -> tuple[int, int] | None:
    """(nodes, GPUs per node) of a training stage as verl runs it (1 x 1 with device cpu); None otherwise."""
    found = _training_section(config, stage)
    if found is None:
        return None
    _, section = found
    if config["device"] == "cpu":
        return 1, 1
    return int(section.get("nnodes", 1)), int(section.get("n_gpus_per_node", 1))


def rehearsal_tasks(config: dict, stage: str) -> int:
    """SLURM tasks (= Ray nodes) of a training stage in a one-host rehearsal; 0 when not rehearsing.

    Only with ``cluster.rehearsal_tasks_as_nodes: true`` and device cpu: the stage section's ``nnodes``."""
    if config["device"] != "cpu" or not config.get("cluster", {}).get("rehearsal_tasks_as_nodes"):
        return 0
    found = _training_section(config, stage)
    if found is None:
        return 0
    return int(found[1].get("nnodes", 1))


def training_threads(config: dict) -> int:
    """``threads:`` of a training rule: :data:`CPU_TRAINING_THREADS` with ``device: cpu``, else
    :data:`GPU_TRAINING_THREADS`. SLURM jobs get their CPUs from ``cpus_per_task`` (:func:`stage_resources`)."""
    return CPU_TRAINING_THREADS if config.get("device") == "cpu" else GPU_TRAINING_THREADS


def header_threads(config: dict, dataset: dict) -> int:
    """``threads:`` of data_headers for one configured ``dataset``: ``data.headers.workers`` gcc checks in parallel
    (0: 4; Snakemake caps it at --cores) where the dataset's headers are checked, one where they are not (the job
    copies the records)."""
    if not dataset["check_headers"]:
        return 1
    return config["data"]["headers"]["workers"] or 4


def stage_resources(config: dict, stage: str) -> dict:
    """Snakemake resources of ``stage``'s jobs; ``config`` is the schema-validated config."""
    cl = config["cluster"]
    out = dict(cl["default_resources"])
    explicit = dict(cl.get("stages", {}).get(stage, {}))
    found = _training_section(config, stage)
    if found is not None:
        path, section = found
        for res_key, key in (("nodes", "nnodes"), ("gpu", "n_gpus_per_node")):
            if res_key in explicit:
                raise ResourceError(
                    f"config: cluster.stages.{stage}.{res_key} is set, but the {stage} stage's topology comes "
                    f"from {path}.{key} (what verl is told); delete cluster.stages.{stage}.{res_key} and set "
                    f"{path}.{key}"
                )
        out.update(explicit)
        if config["device"] != "cpu":
            out["nodes"] = int(section.get("nnodes", 1))
            out["gpu"] = int(section.get("n_gpus_per_node", 1))
        elif rehearsal_tasks(config, stage) > 1:
            # one-host rehearsal: one SLURM task per would-be node on one host (the Ray bootstrap's test mode)
            out["nodes"] = 1
            out["tasks"] = rehearsal_tasks(config, stage)
    else:
        out.update(explicit)
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
    if gpus:
        # One task per node, which the job's own steps (Ray nodes, torchrun) use as a whole. Plugin 2.6.x adds
        # --ntasks-per-gpu=1 to every GPU job unless tasks_per_gpu is set (8 tasks of cpus_per_task CPUs each on
        # an 8-GPU node); 2.8.x adds it only when asked. 0 means "do not add it" in both.
        out["tasks_per_gpu"] = 0
    # partition: the stage's own, else the CPU partition for jobs without GPUs, else the cluster's
    partition = out.pop("partition", None) or (None if gpus else cl.get("cpu_partition")) or cl.get("partition")
    qos = out.pop("qos", None) or cl.get("qos")
    for value, flag in ((partition, "slurm_partition"), (cl.get("account"), "slurm_account"), (qos, "qos")):
        if value:
            out[flag] = value
    site_extra = cl.get("slurm_extra")
    if site_extra and "--exclusive" in site_extra.split():
        raise ResourceError(
            "config: cluster.slurm_extra has --exclusive, which gives every job, CPU jobs included, whole nodes; "
            "remove it and set cluster.stages.<stage>.exclusive: true for the stages that use whole nodes"
        )
    exclusive = "--exclusive" if out.pop("exclusive", False) else None
    extra = " ".join(x for x in (site_extra, out.pop("slurm_extra", None), exclusive) if x)
    if extra:
        out["slurm_extra"] = extra
    return out

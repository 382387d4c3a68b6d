"""codegrpo.cluster.resources: what each stage's jobs ask SLURM for, from the validated config."""

from __future__ import annotations

import copy

import pytest

from codegrpo.cluster.resources import ResourceError, stage_resources, training_topology

from tests.conftest import REPO_ROOT as REPO


def _with(cfg: dict, **cluster) -> dict:
    out = copy.deepcopy(cfg)
    stages = cluster.pop("stages", None)
    out["cluster"].update(cluster)
    if stages:
        for stage, values in stages.items():
            out["cluster"]["stages"].setdefault(stage, {}).update(values)
    return out


def test_defaults_merged_with_stage_overrides(paper):
    got = stage_resources(paper, "data")
    assert got == {"mem_mb": 16000, "runtime": 120, "cpus_per_task": 8, "nodes": 1}
    # a stage without an entry gets default_resources, without a GPU request (gpu 0 is dropped)
    assert stage_resources(paper, "report") == {"mem_mb": 8000, "runtime": 60, "cpus_per_task": 4, "nodes": 1}


def test_training_topology_comes_from_the_stage_section(paper):
    cfg = copy.deepcopy(paper)
    cfg["skeleton_rl"].update(nnodes=3, n_gpus_per_node=4)
    got = stage_resources(cfg, "skeleton_rl")
    assert got["nodes"] == 3 and got["gres"] == "gpu:4" and "gpu" not in got  # per node on several nodes
    assert training_topology(cfg, "skeleton_rl") == (3, 4)
    cfg["sft"].update(nnodes=1, n_gpus_per_node=2)
    got = stage_resources(cfg, "sft")
    assert got["nodes"] == 1 and got["gpu"] == 2 and "gres" not in got
    # dhrcl keeps its topology in dhrcl.training
    cfg["dhrcl"]["training"].update(nnodes=2, n_gpus_per_node=8)
    assert stage_resources(cfg, "dhrcl")["gres"] == "gpu:8"
    assert training_topology(cfg, "evaluate") is None


@pytest.mark.parametrize("key", ["gpu", "nodes"])
def test_topology_repeated_under_cluster_is_an_error(paper, key):
    cfg = _with(paper, stages={"skeleton_rl": {key: 2}})
    with pytest.raises(ResourceError) as err:
        stage_resources(cfg, "skeleton_rl")
    want = {"gpu": "skeleton_rl.n_gpus_per_node", "nodes": "skeleton_rl.nnodes"}[key]
    assert f"cluster.stages.skeleton_rl.{key}" in str(err.value) and want in str(err.value)


def test_gpu_model_site_flags_and_extra_flags(paper):
    cfg = _with(
        paper,
        gpu_model="a100",
        partition="gpu",
        account="proj",
        qos="high",
        slurm_extra="--mail-type=FAIL",
        stages={"evaluate": {"slurm_extra": "--hint=nomultithread"}},
    )
    got = stage_resources(cfg, "evaluate")
    assert (got["gpu"], got["gpu_model"]) == (1, "a100")
    assert (got["slurm_partition"], got["slurm_account"], got["qos"]) == ("gpu", "proj", "high")
    assert got["slurm_extra"] == "--mail-type=FAIL --hint=nomultithread"
    cfg["skeleton_rl"]["nnodes"] = 2
    assert stage_resources(cfg, "skeleton_rl")["gres"] == "gpu:a100:8"


def test_device_cpu_never_asks_for_gpus(paper, local):
    cfg = copy.deepcopy(paper)
    cfg["device"] = "cpu"
    for stage in ("sft", "skeleton_rl", "skin_rl", "dhrcl", "evaluate"):
        got = stage_resources(cfg, stage)
        assert "gpu" not in got and "gres" not in got, stage
    assert training_topology(cfg, "skeleton_rl") == (1, 1)
    got = stage_resources(local, "sft")
    assert got == {"mem_mb": 6000, "runtime": 60, "cpus_per_task": 2, "nodes": 1}


def _rehearsal() -> dict:
    """config/paper.yaml with config/rehearsal.yaml merged over it, as Snakemake merges --configfile files."""
    import yaml
    from snakemake.utils import update_config

    from codegrpo.config import validate_config

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    update_config(cfg, yaml.safe_load((REPO / "config" / "rehearsal.yaml").read_text()))
    return validate_config(cfg, "paper.yaml + rehearsal.yaml")


def test_rehearsal_runs_two_node_stage_as_two_tasks_on_one_node(paper, local):
    cfg = _rehearsal()
    assert cfg["device"] == "cpu" and cfg["skeleton_rl"]["nnodes"] == 2
    got = stage_resources(cfg, "skeleton_rl")
    assert got["tasks"] == 2 and got["nodes"] == 1 and "gpu" not in got and "gres" not in got
    assert got["cpus_per_task"] * got["tasks"] <= 2  # fits the one-node test cluster's 2 CPUs
    assert training_topology(cfg, "skeleton_rl") == (1, 1)  # verl's CPU mode is told one fake GPU
    # one-node stages and non-training stages are unchanged
    assert "tasks" not in stage_resources(cfg, "skin_rl") and "tasks" not in stage_resources(cfg, "evaluate")
    # the key is the only switch: unset (the default), the same config asks for no tasks
    off = copy.deepcopy(cfg)
    off["cluster"]["rehearsal_tasks_as_nodes"] = False
    assert "tasks" not in stage_resources(off, "skeleton_rl")
    # and it never changes a GPU run: the paper config with it set asks for 2 nodes with 8 GPUs each, no tasks
    gpu = _with(paper, rehearsal_tasks_as_nodes=True)
    assert stage_resources(gpu, "skeleton_rl") == stage_resources(paper, "skeleton_rl")
    assert (
        paper["cluster"]["rehearsal_tasks_as_nodes"] is False and local["cluster"]["rehearsal_tasks_as_nodes"] is False
    )


class _Resources(dict):
    __getattr__ = dict.__getitem__


class _Job:
    """What the plugin's submit-string builder reads of a Snakemake job."""

    def __init__(self, resources: dict, threads: int = 1):
        self.resources = _Resources(resources)
        self.threads = threads


def _sbatch(resources: dict) -> str:
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    params = {
        "run_uuid": "u",
        "slurm_logfile": "l.log",
        "comment_str": "c",
        "account": "",
        "partition": "-p gpu",
        "workdir": "/w",
    }
    job = _Job(resources, threads=resources.get("cpus_per_task", 1))
    return get_submit_command(job, params) + set_gres_string(job)  # what the plugin's run_job submits


def test_gpu_jobs_get_one_task_per_node_from_the_installed_plugin(paper):
    """The sbatch line the installed SLURM executor plugin builds from these resources: GPUs per node, no
    --ntasks-per-gpu (one task per node, whatever the plugin's default)."""
    one = stage_resources(paper, "skin_rl")  # 1 x 8
    two = stage_resources(paper, "skeleton_rl")  # 2 x 8
    assert one["tasks_per_gpu"] == 0 and two["tasks_per_gpu"] == 0
    assert "tasks_per_gpu" not in stage_resources(paper, "data")
    line = _sbatch(one)
    assert " --gpus=8" in line and "--ntasks-per-gpu" not in line and "--cpus-per-task=64" in line
    line = _sbatch(two)
    assert " --gres=gpu:8" in line and " --nodes=2" in line and "--ntasks-per-gpu" not in line
    assert "--gpus=" not in line
    # without the setting the plugin honours tasks_per_gpu / tasks: a value >= 1 would add it
    assert "--ntasks-per-gpu=1" in _sbatch({**one, "tasks_per_gpu": 1})
    # CPU jobs: one task
    assert " --ntasks=1" in _sbatch(stage_resources(paper, "data"))


def test_cpu_jobs_go_to_the_cpu_partition_and_whole_nodes_only_where_asked(paper):
    cfg = _with(
        paper,
        partition="gpu",
        cpu_partition="cpu",
        stages={"tables": {"partition": "short", "qos": "fast"}, "skeleton_rl": {"exclusive": True}},
    )
    assert stage_resources(cfg, "data")["slurm_partition"] == "cpu"  # no GPU: the CPU partition
    assert stage_resources(cfg, "evaluate")["slurm_partition"] == "gpu"  # a GPU job stays on the GPU one
    rl = stage_resources(cfg, "skeleton_rl")
    assert rl["slurm_partition"] == "gpu" and rl["slurm_extra"] == "--exclusive"
    assert "slurm_extra" not in stage_resources(cfg, "data")  # CPU jobs never take whole nodes
    tables = stage_resources(cfg, "tables")  # a stage's own partition wins
    assert (tables["slurm_partition"], tables["qos"]) == ("short", "fast")
    assert "partition" not in tables and "exclusive" not in rl  # not passed on as resources
    no_cpu = _with(paper, partition="gpu")
    assert stage_resources(no_cpu, "data")["slurm_partition"] == "gpu"  # no CPU partition: the cluster's


def test_site_wide_exclusive_is_refused(paper):
    cfg = _with(paper, slurm_extra="--exclusive --mail-type=FAIL")
    with pytest.raises(ResourceError, match=r"cluster\.stages\.<stage>\.exclusive"):
        stage_resources(cfg, "data")

"""codegrpo.cluster.shape: the stages' requests against the nodes sinfo reports (hand-written sinfo output)."""

from __future__ import annotations

import copy
import subprocess
import sys

from codegrpo.cluster.shape import Node, check_config, check_jobs, check_request, parse_sinfo
from tests.conftest import REPO_ROOT

SINFO = """gpu*|gn01|64|512000|gpu:a100:8(S:0-1)
gpu*|gn02|64|512000|gpu:a100:8(S:0-1)
cpu|cn01|128|256000|(null)
small|sn01|16|120000|gpu:1
"""


def test_parse_sinfo():
    nodes = parse_sinfo(SINFO)
    assert nodes[0] == Node("gpu", "gn01", 64, 512000, 8, "a100", default=True)
    assert nodes[2] == Node("cpu", "cn01", 128, 256000, 0, None)
    assert nodes[3] == Node("small", "sn01", 16, 120000, 1, None)
    assert parse_sinfo("gpu|g1|8|1000+|gpu:h100:4,gpu:h100:4\n")[0].gpus == 8


def test_paper_stages_fit_a_cluster_of_8_gpu_nodes(paper):
    cfg = copy.deepcopy(paper)
    cfg["cluster"].update(partition="gpu", cpu_partition="cpu")
    assert check_config(cfg, parse_sinfo(SINFO)) == []


def test_paper_stages_on_a_cluster_of_small_gpu_nodes(paper):
    """Where the smoke test's 1 GPU / 120 GB fits but the training stages' 8 GPUs / 480 GB / 64 CPUs never do."""
    cfg = copy.deepcopy(paper)
    cfg["cluster"].update(partition="small")
    problems = check_config(cfg, parse_sinfo(SINFO))
    by_stage = {p.split(" asks")[0]: p for p in problems}
    assert "stage smoke" not in by_stage and "stage evaluate" not in by_stage
    sft = by_stage["stage sft"]
    assert "480000 MB per node (the largest node of partition 'small' has 120000 MB; cluster.stages.sft.mem_mb)" in sft
    assert "64 CPUs per node" in sft and "8 GPUs per node (the most on a node of partition 'small' is 1" in sft
    assert {"stage sft", "stage skeleton_rl", "stage skin_rl", "stage dhrcl"} <= set(by_stage)


def test_node_count_model_and_unknown_partition():
    nodes = parse_sinfo(SINFO)
    two = {"slurm_partition": "gpu", "nodes": 3, "cpus_per_task": 8, "mem_mb": 1000, "gres": "gpu:8"}
    (p,) = check_request("rule x", two, nodes, key="cluster.stages.x")
    assert "3 nodes that each fit the request, but partition 'gpu' has 2" in p
    h100 = {"slurm_partition": "gpu", "gpu": 1, "gpu_model": "h100", "cpus_per_task": 1, "mem_mb": 1}
    assert "GPU model 'h100' (models in partition 'gpu': ['a100']" in check_request("r", h100, nodes, key="k")[0]
    (p,) = check_request("r", {"slurm_partition": "nope"}, nodes, key="k")
    assert "partition 'nope' has no nodes in sinfo" in p
    # jobs of one rule with one request are checked once
    assert len(check_jobs([("r", {"slurm_partition": "nope"})] * 5, nodes)) == 1


def test_cli_check_with_a_saved_sinfo(tmp_path):
    (tmp_path / "sinfo.txt").write_text(SINFO)

    def check(site: str) -> subprocess.CompletedProcess:
        (tmp_path / "site.yaml").write_text(site)
        args = [
            "--configfile",
            "config/paper.yaml",
            str(tmp_path / "site.yaml"),
            "--sinfo-file",
            str(tmp_path / "sinfo.txt"),
        ]
        return subprocess.run(
            [sys.executable, "-m", "codegrpo.cluster", "check", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    proc = check("cluster: {partition: small}\n")
    assert proc.returncode == 1, proc.stderr
    assert "PROBLEM stage sft asks for" in proc.stdout and "stage(s) cannot be scheduled" in proc.stdout
    proc = check("cluster: {partition: gpu, cpu_partition: cpu}\n")
    assert proc.returncode == 0 and "every stage fits" in proc.stdout, proc.stdout + proc.stderr

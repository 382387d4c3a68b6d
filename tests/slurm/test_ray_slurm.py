"""codegrpo.cluster inside real SLURM jobs: allocation reading and the Ray bootstrap over two tasks."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from codegrpo.cluster import leftover_pids

from .conftest import REPO, node_gpus, sbatch, wait_job


def _tagged(output: str, tag: str) -> dict:
    for line in output.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1 :])
    raise AssertionError(f"no {tag} line in job output:\n{output[-3000:]}")


def _free_port_base() -> int:
    """A base port whose next ~900 ports are free now (Ray uses base .. base+1000+2*400)."""
    for base in range(21000, 60000, 1700):
        ok = True
        for port in (base, base + 1, base + 11, base + 1000, base + 1400):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port range")


@pytest.fixture
def temp_root():
    """A short Ray temp dir (Ray puts Unix sockets in it), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="cgr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_ray_cluster_over_two_tasks(tmp_path, temp_root):
    """--ntasks=2 on one host = two Ray nodes (head local, worker through srun); both register, all stop."""
    out = tmp_path / "job.out"
    port = _free_port_base()
    cmd = (
        f"{sys.executable} -m codegrpo.cluster --tasks-as-nodes --port {port} "
        f"--temp-root {temp_root} --log-dir {tmp_path / 'ray-logs'} "
        f"--object-store-memory 80000000 --timeout 240 --run-tasks"
    )
    job = sbatch(
        [
            "--ntasks=2",
            "--cpus-per-task=1",
            "--mem=3000",
            "-t",
            "10",
            "-J",
            "cgr-ray-test",
            "-o",
            str(out),
            "--wrap",
            cmd,
        ],
        cwd=REPO,
    )
    state = wait_job(job, timeout_s=400)
    text = out.read_text()
    assert state == "COMPLETED", f"job {job} ended {state}:\n{text[-4000:]}"

    alloc = _tagged(text, "ALLOCATION")
    assert alloc["job_id"] == job
    assert alloc["nnodes"] == 2 and len(set(alloc["nodes"])) == 1  # two tasks on the one node
    cluster = _tagged(text, "CLUSTER")
    assert cluster["nodes"] == 2 and len(set(cluster["node_ids"])) == 2
    assert cluster["CPU"] == 2 and cluster["GPU"] == 0
    # Ray <= 2.47 has no authentication: its session dirs and Unix sockets are the user's alone (umask 077)
    private = _tagged(text, "PRIVATE")
    # (Ray makes its own session dirs 0777; the 0700 root above them is what keeps other users out)
    assert private["root_mode"] == "0o700" and private["node_dir_modes"] == ["0o777"]
    assert private["sockets"] > 0 and private["sockets_open_to_others"] == []
    # a driver that joins through the environment (as verl's does) gets a task run on each node
    tasks = _tagged(text, "TASKS")
    assert sorted(t["node_id"] for t in tasks) == cluster["node_ids"]
    assert len({t["pid"] for t in tasks}) == 2
    assert _tagged(text, "STOPPED") == {"leftover_pids": []}
    # the worker's log shows it joined through srun, and nothing of either node is still running here
    assert (tmp_path / "ray-logs" / f"ray-node1-{alloc['nodes'][1]}.log").exists()
    assert leftover_pids(temp_root) == []


def test_allocation_inside_a_job(tmp_path):
    """current_allocation() inside a job: the job id, the node, CPUs and (fake) GPUs per node."""
    gpus = node_gpus()
    out = tmp_path / "job.out"
    code = (
        "import json; from codegrpo.cluster import current_allocation as c; a = c(); "
        "print('ALLOCATION ' + json.dumps({'job_id': a.job_id, 'nodes': list(a.nodes), "
        "'gpus': a.gpus_per_node, 'cpus': a.cpus_per_node}))"
    )
    args = ["--ntasks=1", "--cpus-per-task=2", "--mem=1000", "-t", "5", "-o", str(out)]
    if gpus:
        args.append("--gres=gpu:1")
    job = sbatch([*args, "--wrap", f'{sys.executable} -c "{code}"'], cwd=REPO)
    assert wait_job(job, timeout_s=120) == "COMPLETED", out.read_text()
    alloc = _tagged(out.read_text(), "ALLOCATION")
    assert alloc["job_id"] == job
    assert alloc["nodes"] == [socket.gethostname().split(".")[0]]
    assert alloc["cpus"] == 2
    assert alloc["gpus"] == (1 if gpus else 0)


def test_allocation_inside_a_job_step(tmp_path):
    """Inside a job step (as under Snakemake's SLURM executor) the job-level values are still read."""
    out = tmp_path / "job.out"
    code = (
        "import json; from codegrpo.cluster import current_allocation as c; a = c(); "
        "print('ALLOCATION ' + json.dumps({'job_id': a.job_id, 'cpus': a.cpus_per_node}))"
    )
    job = sbatch(
        [
            "--ntasks=2",
            "--cpus-per-task=1",
            "--mem=1000",
            "-t",
            "5",
            "-o",
            str(out),
            "--wrap",
            f'srun -n1 --cpus-per-task=1 {sys.executable} -c "{code}"',
        ],
        cwd=REPO,
    )
    assert wait_job(job, timeout_s=120) == "COMPLETED", out.read_text()
    alloc = _tagged(out.read_text(), "ALLOCATION")
    assert alloc == {"job_id": job, "cpus": 2}


def test_ray_node_gets_the_jobs_gpus(tmp_path):
    """A GPU job: the Ray node (its own job step with --gres --gpu-bind=none) announces the allocation's GPUs.
    With the defaults: a random free port and a private node-local temp dir /tmp/codegrpo-ray-<job>-<random>."""
    if node_gpus() == 0:
        pytest.skip("the Slurm node has no (fake) GPU gres; start it with SLURM_FAKE_GPUS=1")
    out = tmp_path / "job.out"
    cmd = (
        f"{sys.executable} -m codegrpo.cluster --log-dir {tmp_path / 'ray-logs'} "
        f"--object-store-memory 80000000 --timeout 240 --run-tasks"
    )
    job = sbatch(
        ["--ntasks=1", "--cpus-per-task=1", "--gres=gpu:1", "--mem=2000", "-t", "10", "-o", str(out), "--wrap", cmd],
        cwd=REPO,
    )
    state = wait_job(job, timeout_s=400)
    text = out.read_text()
    assert state == "COMPLETED", f"job {job} ended {state}:\n{text[-4000:]}"
    assert _tagged(text, "ALLOCATION")["gpus_per_node"] == 1
    cluster = _tagged(text, "CLUSTER")
    assert (cluster["nodes"], cluster["GPU"]) == (1, 1)
    (task,) = _tagged(text, "TASKS")
    assert task["node_id"] == cluster["node_ids"][0]
    private = _tagged(text, "PRIVATE")
    temp_root = Path(private["root"])
    try:
        assert 20000 <= int(cluster["address"].rsplit(":", 1)[1]) < 59000  # random, not 6379
        assert temp_root.parent == Path("/tmp") and temp_root.name.startswith(f"codegrpo-ray-{job}-")
        assert private["root_mode"] == "0o700" and private["sockets_open_to_others"] == []
        assert _tagged(text, "STOPPED") == {"leftover_pids": []}
        assert leftover_pids(temp_root) == []
    finally:
        shutil.rmtree(temp_root, ignore_errors=True)


_NESTED = r"""
import json, subprocess, sys
from codegrpo.cluster import step_srun, unset_prefix
argv = unset_prefix() + step_srun(nodes=1, ntasks=1, ntasks_per_node=1, cpus_per_task=2, gpus_per_node=GPUS,
                                  job_name="nested") + ["sh", "-c", "echo VISIBLE=$CUDA_VISIBLE_DEVICES STEP=$SLURM_STEP_ID"]
proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
print("NESTED " + json.dumps({"argv": argv, "rc": proc.returncode, "out": proc.stdout, "err": proc.stderr[-1500:]}))
"""


def test_nested_step_from_inside_a_job_step(tmp_path):
    """What the multi-node SFT launch does, on one node: from inside a job step that holds every CPU (as the
    executor plugin's step does, with --mem-per-cpu in its environment), a second step with --overlap, the
    node's GPUs (--gres, --gpu-bind=none) and --mem=0 starts at once (no wait for the CPUs, no conflict with the
    inherited memory setting)."""
    gpus = 1 if node_gpus() else 0
    script = tmp_path / "nested.py"
    script.write_text(_NESTED.replace("GPUS", str(gpus)))
    out = tmp_path / "job.out"
    gres = ["--gres=gpu:1"] if gpus else []
    job = sbatch(
        [
            "--ntasks=1",
            "--cpus-per-task=2",
            "--mem=2000",
            "-t",
            "5",
            *gres,
            "-o",
            str(out),
            "--wrap",
            f"srun -n1 --cpus-per-task=2 --mem-per-cpu=500 {sys.executable} {script}",
        ],
        cwd=REPO,
    )
    state = wait_job(job, timeout_s=300)
    text = out.read_text()
    assert state == "COMPLETED", f"job {job} ended {state}:\n{text[-3000:]}"
    res = _tagged(text, "NESTED")
    assert res["rc"] == 0, res
    i = res["argv"].index("srun")
    unset = res["argv"][:i]
    assert unset[0] == "env" and "SLURM_JOB_ID" not in unset and "SLURM_NTASKS" in unset
    assert any(v.startswith("SLURM_MEM_PER_") for v in unset)  # the enclosing step's memory setting
    assert "STEP=1" in res["out"], res  # a step of its own, next to the enclosing step 0
    if gpus:
        assert "VISIBLE=0" in res["out"], res

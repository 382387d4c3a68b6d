"""codegrpo.cluster without a cluster (host lists, job records, Ray plans) and the SLURM profile's
resources as the real workflow computes them (dry runs from the repository root).

The same code inside real SLURM jobs is tested in tests/slurm/.
"""

from __future__ import annotations

from tests.conftest import REPO_ROOT, copy_workflow, job_counts, run_snakemake
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from codegrpo import cluster
from codegrpo.cluster import (
    Allocation,
    ClusterError,
    RayCluster,
    allocation_from,
    expand_counts,
    expand_hostlist,
    nested_srun_env,
    parse_job_record,
    port_base_free,
    random_port_base,
    step_srun,
    unset_prefix,
)

from tests.conftest import REPO_ROOT as REPO

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
ME = socket.gethostname().split(".")[0]

HOSTLISTS = {
    "vm": ["vm"],
    "gpu[01-03]": ["gpu01", "gpu02", "gpu03"],
    "n[8-10],login": ["n8", "n9", "n10", "login"],
    "a[1-2,05],b-c[01-02]x[1-2]": ["a1", "a2", "a05", "b-c01x1", "b-c01x2", "b-c02x1", "b-c02x2"],
    "node[008-011]": ["node008", "node009", "node010", "node011"],
}


@pytest.mark.parametrize("hostlist", sorted(HOSTLISTS))
def test_builtin_hostlist_parser(hostlist):
    assert expand_hostlist(hostlist, use_scontrol=False) == HOSTLISTS[hostlist]


@pytest.mark.skipif(not shutil.which("scontrol"), reason="scontrol not installed (apt slurm-client)")
@pytest.mark.parametrize("hostlist", sorted(HOSTLISTS))
def test_builtin_parser_agrees_with_scontrol(hostlist):
    out = subprocess.run(
        ["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True, check=True
    ).stdout.split()
    assert expand_hostlist(hostlist, use_scontrol=False) == out


@pytest.mark.parametrize("bad", ["", "a[1-2", "a]1[", "a[x-y]", "a[3-1]"])
def test_bad_hostlists_are_rejected(bad):
    with pytest.raises(ClusterError):
        expand_hostlist(bad, use_scontrol=False)


def test_expand_counts():
    assert expand_counts("8(x2),4") == [8, 8, 4]
    assert expand_counts("2") == [2]
    with pytest.raises(ClusterError, match="bad SLURM count"):
        expand_counts("8(x)")


# A `scontrol show job -o` record of a 2-node job (format of Slurm 22.05; fields trimmed).
RECORD_2X8 = (
    "JobId=4242 JobName=skeleton_rl UserId=u(1) JobState=RUNNING Partition=gpu "
    "NodeList=gpu[07-08] BatchHost=gpu07 NumNodes=2 NumCPUs=128 NumTasks=2 CPUs/Task=64 "
    "TRES=cpu=128,mem=960000M,node=2,billing=128,gres/gpu=16 TresPerNode=gres:gpu:8"
)


def test_parse_job_record():
    rec = parse_job_record(RECORD_2X8)
    assert rec["JobId"] == "4242" and rec["NodeList"] == "gpu[07-08]" and rec["CPUs/Task"] == "64"
    with pytest.raises(ClusterError, match="not a scontrol job record"):
        parse_job_record("slurm_load_jobs error: Invalid job id specified")


def test_allocation_from_two_node_record():
    alloc = allocation_from({"SLURM_JOB_ID": "4242"}, parse_job_record(RECORD_2X8))
    assert alloc.nodes == ("gpu07", "gpu08")
    assert (alloc.nnodes, alloc.gpus_per_node, alloc.cpus_per_node, alloc.total_gpus) == (2, 8, 64, 16)
    assert not alloc.same_host


def test_gpus_per_job_are_split_over_nodes():
    rec = parse_job_record(RECORD_2X8.replace("TresPerNode=gres:gpu:8", "TresPerJob=gres:gpu:a100:16"))
    assert allocation_from({"SLURM_JOB_ID": "4242"}, rec).gpus_per_node == 8
    uneven = parse_job_record(RECORD_2X8.replace("TresPerNode=gres:gpu:8", "TresPerJob=gres:gpu:9"))
    with pytest.raises(ClusterError, match="uneven"):
        allocation_from({"SLURM_JOB_ID": "4242"}, uneven)


def test_environment_wins_for_cpus_and_is_used_without_a_record():
    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_JOB_CPUS_PER_NODE": "16(x2)",
        "SLURM_GPUS_ON_NODE": "4",
    }
    alloc = allocation_from(env, None)
    assert (alloc.nodes, alloc.cpus_per_node, alloc.gpus_per_node) == (("n1", "n2"), 16, 4)


def test_tasks_as_nodes_test_mode():
    env = {
        "SLURM_JOB_ID": "9",
        "SLURM_JOB_NODELIST": "vm",
        "SLURM_TASKS_PER_NODE": "2",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_GPUS_ON_NODE": "1",
    }
    alloc = allocation_from(env, None, tasks_as_nodes=True)
    assert alloc.nodes == ("vm", "vm") and alloc.same_host
    assert (alloc.cpus_per_node, alloc.gpus_per_node) == (1, 0)  # CPU only in test mode


def test_outside_slurm(monkeypatch):
    for key in list(os.environ):
        if key.startswith("SLURM_"):
            monkeypatch.delenv(key)
    with pytest.raises(ClusterError, match="not inside a SLURM job"):
        cluster.current_allocation()
    with cluster.multinode_ray() as rc:
        assert rc is None  # verl then starts its own local Ray


def _flag(cmd, name):
    vals = [c.split("=", 1)[1] for c in cmd if c.startswith(name + "=")]
    assert len(vals) == 1, (name, cmd)
    return vals[0]


def test_plan_multi_host_head_local_workers_through_srun(tmp_path):
    alloc = Allocation("4242", ("othernode", ME), gpus_per_node=8, cpus_per_node=64)
    rc = RayCluster(alloc, port=6380, temp_root=tmp_path / "ray")
    (head_host, head), (worker_host, worker) = rc.plan()
    assert head_host == ME and worker_host == "othernode"  # the head runs where the driver runs
    # every Ray node is its own job step with the node's GPUs, the head on this host
    assert head[:6] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", ME]
    assert worker[:6] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", "othernode"]
    for cmd in (head, worker):
        assert "--gres=gpu:8" in cmd and "--cpus-per-task=64" in cmd and "--mem=0" in cmd
        assert "--gpu-bind=none" in cmd  # all of the node's GPUs visible to its one Ray node
        assert any(c.endswith("/ray") or c == "ray" for c in cmd) and "--block" in cmd
    assert "--head" in head
    assert _flag(head, "--port") == "6380" and _flag(head, "--num-gpus") == "8"
    assert _flag(worker, "--address").endswith(":6380") and "--head" not in worker
    # one host each: the same ports and a node-local temp dir on every node
    assert _flag(head, "--node-manager-port") == _flag(worker, "--node-manager-port")
    assert _flag(head, "--temp-dir") == _flag(worker, "--temp-dir")


def test_plan_same_host_gets_distinct_ports_and_dirs(tmp_path):
    alloc = Allocation("9", (ME, ME, ME), gpus_per_node=0, cpus_per_node=1, tasks_as_nodes=True)
    plans = [cmd for _, cmd in RayCluster(alloc, port=30000, temp_root=tmp_path).plan()]
    for name in (
        "--node-manager-port",
        "--object-manager-port",
        "--metrics-export-port",
        "--min-worker-port",
        "--temp-dir",
        "--runtime-env-agent-port",
    ):
        values = [_flag(cmd, name) for cmd in plans]
        assert len(set(values)) == 3, (name, values)
    assert all("--gres" not in " ".join(cmd) for cmd in plans)


def test_default_port_is_random_and_free_and_temp_dir_node_local(tmp_path):
    alloc = Allocation("4243", ("othernode", ME), gpus_per_node=8, cpus_per_node=64)
    a, b = RayCluster(alloc), RayCluster(alloc, temp_base=tmp_path)
    assert 20000 <= a.port < 59000 and 20000 <= b.port < 59000
    assert port_base_free(a.port, 11) and port_base_free(b.port, 11)
    # node-local, per job and unpredictable: /tmp/codegrpo-ray-<job>-<random>
    assert a.temp_root.parent == Path("/tmp") and a.temp_root.name.startswith("codegrpo-ray-4243-")
    assert b.temp_root.parent == tmp_path and a.temp_root.name != b.temp_root.name
    head = a.plan()[0][1]
    assert _flag(head, "--port") == str(a.port) and _flag(head, "--node-manager-port") == str(a.port + 1)
    assert _flag(head, "--temp-dir") == str(a.temp_root / "n") and "--include-dashboard=false" in head
    # one host, several Ray nodes (test mode): the whole worker-port range is checked free
    same = RayCluster(Allocation("9", (ME, ME), 0, 1, tasks_as_nodes=True), temp_base=tmp_path)
    assert port_base_free(same.port, 1000 + 2 * 400)


def test_random_port_base_skips_busy_ports():
    import random
    import socket as _socket

    rng = random.Random(5)
    first = random_port_base(11, rng=random.Random(5))
    with _socket.socket() as busy:
        busy.bind(("", first + 3))  # one port of the first candidate's range is taken
        assert not port_base_free(first, 11)
        assert random_port_base(11, rng=rng) != first


def test_step_srun_flags_and_nested_env():
    assert step_srun(nodes=2, ntasks=2, ntasks_per_node=1, cpus_per_task=64, gpus_per_node=8, job_name="x") == [
        "srun",
        "--overlap",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=64",
        "--mem=0",
        "--kill-on-bad-exit=1",
        "--job-name=x",
        "--gres=gpu:8",
        "--gpu-bind=none",
    ]
    assert "--gres" not in " ".join(step_srun(host="n1", cpus_per_task=2))
    env = {"SLURM_JOB_ID": "5", "SLURM_MEM_PER_CPU": "100", "SRUN_CPUS_PER_TASK": "2", "SLURM_CONF": "/c", "PATH": "/b"}
    assert nested_srun_env(env) == {"SLURM_JOB_ID": "5", "SLURM_CONF": "/c", "PATH": "/b"}
    assert unset_prefix(env) == ["env", "-u", "SLURM_MEM_PER_CPU", "-u", "SRUN_CPUS_PER_TASK"]
    assert unset_prefix({"PATH": "/b"}) == []


def test_cpu_only_announces_no_gpus(tmp_path):
    alloc = Allocation("1", ("x", ME), gpus_per_node=8, cpus_per_node=4)
    rc = RayCluster(alloc, cpu_only=True, temp_root=tmp_path)
    assert all(_flag(cmd, "--num-gpus") == "0" for _, cmd in rc.plan())


def test_node_resources_are_announced_to_ray_not_asked_of_slurm(tmp_path):
    """CPU training across task-nodes: each Ray node announces device slots and a custom resource that SLURM
    never sees (no --gres on the steps), and readiness waits for what was announced."""
    alloc = Allocation("1", (ME, ME), gpus_per_node=0, cpus_per_node=1, tasks_as_nodes=True)
    rc = RayCluster(
        alloc, cpu_only=True, temp_root=tmp_path, node_resources={"num_gpus": 1, "num_cpus": 4, "resources": {"cpu": 1}}
    )
    for _, cmd in rc.plan():
        assert _flag(cmd, "--num-gpus") == "1" and _flag(cmd, "--num-cpus") == "4"
        assert json.loads(_flag(cmd, "--resources")) == {"cpu": 1}
        assert "--gres" not in " ".join(cmd) and _flag(cmd, "--cpus-per-task") == "1"
    assert (rc.ray_gpus_per_node, rc.ray_cpus_per_node, rc.gpus_per_node) == (1, 4, 0)
    plain = RayCluster(alloc, cpu_only=True, temp_root=tmp_path)
    assert all("--resources" not in " ".join(cmd) for _, cmd in plain.plan())
    assert (plain.ray_gpus_per_node, plain.ray_cpus_per_node) == (0, 1)


def test_head_must_be_in_the_allocation(tmp_path):
    rc = RayCluster(Allocation("1", ("a-node", "b-node"), 8, 8), temp_root=tmp_path)
    with pytest.raises(ClusterError, match="not in the allocation"):
        rc.plan()


def test_env_needs_a_started_cluster(tmp_path):
    with pytest.raises(ClusterError, match="not started"):
        _ = RayCluster(Allocation("1", (ME, "b"), 0, 1), temp_root=tmp_path).env


# ---- the SLURM profile and stage_resources(), through the real workflow (dry runs) -----------------


def _dry_run(*args: str) -> str:
    """Dry run of the target in args, forced (results/ may already hold it)."""
    proc = subprocess.run([SNAKEMAKE, "-n", "--force", *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return proc.stdout + proc.stderr


def _resources(output: str, rule: str) -> dict[str, str]:
    m = re.search(rf"rule {rule}:\n(?:    .*\n)*?    resources: (.*)\n", output)
    assert m, output[-3000:]
    return dict(item.split("=", 1) for item in m.group(1).split(", "))


def _paper() -> dict:
    with open(REPO / "config" / "paper.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _first_dataset() -> str:
    with open(REPO / "config.yaml", encoding="utf-8") as fh:
        return next(iter(yaml.safe_load(fh)["datasets"]))


@pytest.mark.slow
def test_profile_slurm_is_found_from_the_repo_root_and_uses_the_paper_config():
    target = f"results/data/{_first_dataset()}/ingest_summary.json"
    out = _dry_run("--profile", "slurm", target)
    assert "Using profile slurm" in out
    want = _paper()["cluster"]["stages"]["data"]
    got = _resources(out, "data_ingest")
    assert (int(got["mem_mb"]), int(got["runtime"]), int(got["cpus_per_task"])) == (
        want["mem_mb"],
        want["runtime"],
        want["cpus_per_task"],
    )


@pytest.mark.slow
def test_ci_layer_switches_to_the_cpu_config():
    target = f"results/data/{_first_dataset()}/ingest_summary.json"
    got = _resources(_dry_run("--profile", "slurm", "--profile", "profiles/ci", target), "data_ingest")
    with open(REPO / "config.yaml", encoding="utf-8") as fh:
        cpu = yaml.safe_load(fh)["cluster"]
    want = {**cpu["default_resources"], **cpu["stages"].get("data", {})}
    assert int(got["mem_mb"]) == want["mem_mb"] and int(got["cpus_per_task"]) == want["cpus_per_task"]


@pytest.mark.slow
def test_training_topology_sizes_the_allocation(tmp_path):
    """skeleton_rl: its nnodes x n_gpus_per_node (what verl is told) is what SLURM is asked for."""
    paper = _paper()
    got = _resources(_dry_run("skeleton_rl_train", "--profile", "slurm"), "skeleton_rl_train")
    want = paper["skeleton_rl"]
    assert want["nnodes"] > 1, "config/paper.yaml: this check needs a multi-node skeleton_rl"
    assert int(got["nodes"]) == want["nnodes"]
    assert got["gres"] == f"gpu:{want['n_gpus_per_node']}"  # per node, since nodes > 1

    override = tmp_path / "bad.yaml"
    override.write_text(yaml.safe_dump({"cluster": {"stages": {"skeleton_rl": {"nodes": 3}}}}))
    proc = subprocess.run(
        [
            SNAKEMAKE,
            "-n",
            "--force",
            "skeleton_rl_train",
            "--profile",
            "slurm",
            "--configfile",
            "config/paper.yaml",
            str(override),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "delete cluster.stages.skeleton_rl.nodes and set skeleton_rl.nnodes" in proc.stdout + proc.stderr


# ---- partial reruns (docs/cluster.md), on the real data stage in a copy of the workflow ------------


def _smk(wd: Path, *args: str) -> str:
    proc = run_snakemake("--cores", "2", *args, cwd=wd, lock=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def _mtimes(wd: Path, pattern: str) -> dict[str, int]:
    return {str(p.relative_to(wd)): p.stat().st_mtime_ns for p in sorted(wd.glob(pattern))}


@pytest.fixture(scope="module")
def data_done(tmp_path_factory) -> Path:
    """A workflow copy whose data stage has run (locally)."""
    wd = copy_workflow(tmp_path_factory.mktemp("partial") / "wf")
    _smk(wd, "data")
    return wd


@pytest.fixture
def done_copy(data_done, tmp_path) -> Path:
    dest = tmp_path / "wf"
    shutil.copytree(data_done, dest, symlinks=True)  # copy2: modification times kept
    return dest


@pytest.mark.slow
def test_one_rule_alone(done_copy):
    wd = done_copy
    upstream = _mtimes(wd, "results/data/*/records.jsonl")
    parquet = _mtimes(wd, "results/data/rl/*.parquet")
    assert upstream and parquet
    ran = job_counts(_smk(wd, "--forcerun", "data_parquet", "--until", "data_parquet"))
    assert set(ran) == {"data_parquet"}
    assert _mtimes(wd, "results/data/*/records.jsonl") == upstream
    assert all(_mtimes(wd, "results/data/rl/*.parquet")[k] > v for k, v in parquet.items())


@pytest.mark.slow
def test_changed_code_reruns_by_default_but_not_without_the_code_trigger(done_copy):
    wd = done_copy
    script = wd / "workflow_scripts" / "data_ingest.py"
    # newer than every output (the checkout's own times can be older than the results: an old clone)
    later = time.time() + 3600
    os.utime(script, (later, later))
    assert "data_ingest" in job_counts(_smk(wd, "-n", "data"))
    assert job_counts(_smk(wd, "-n", "data", "--rerun-triggers", "mtime", "input", "params")) == {}


@pytest.mark.slow
def test_results_copied_into_a_fresh_clone(done_copy, tmp_path):
    """Copied results (no .snakemake metadata, modification times in copy order): only the last
    rule reruns with --allowed-rules; --touch then marks everything present as up to date."""
    wd = done_copy
    shutil.rmtree(wd / ".snakemake")
    files = sorted((wd / "results").rglob("*"), key=lambda p: str(p), reverse=True)
    base = int(time.time()) - 100_000
    for i, p in enumerate(files):  # upstream records newer than the parquet built from them
        os.utime(p, (base + i, base + i))
    assert {"data_normalize", "data_headers", "data_parquet"} <= set(job_counts(_smk(wd, "-n", "data")))
    upstream = _mtimes(wd, "results/data/*/records.jsonl")
    ran = job_counts(_smk(wd, "data", "--allowed-rules", "data_parquet", "data"))
    assert set(ran) <= {"data_parquet", "data"} and "data_parquet" in ran
    assert _mtimes(wd, "results/data/*/records.jsonl") == upstream
    parquet = _mtimes(wd, "results/data/*/*.parquet")
    _smk(wd, "data", "--touch")
    assert job_counts(_smk(wd, "-n", "data")) == {}
    assert _mtimes(wd, "results/data/*/*.parquet").keys() == parquet.keys()


@pytest.mark.slow
def test_importing_a_checkpoint_skips_the_upstream_stages(tmp_path):
    wd = copy_workflow(tmp_path / "wf")
    full = job_counts(_smk(wd, "-n", "skin_rl"))
    assert {"data_parquet", "sft_train", "skin_rl_train"} <= set(full)
    override = tmp_path / "import.yaml"
    override.write_text(yaml.safe_dump({"skin_rl": {"import": str(tmp_path / "some-model")}}))
    ran = job_counts(_smk(wd, "-n", "skin_rl", "--configfile", "config.yaml", str(override)))
    assert set(ran) == {"skin_rl_train", "skin_rl"}


@pytest.mark.slow
def test_a_ray_node_that_cannot_start_is_reported_and_nothing_is_left(tmp_path, monkeypatch):
    """srun refuses (no such job) or is missing: start() raises ClusterError naming the node, stops
    what it started, and leaves the environment as it was."""
    monkeypatch.setenv("SLURM_JOB_ID", "999999999")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    temp_root = Path(tempfile.mkdtemp(prefix="cgr-", dir="/tmp"))
    rc = RayCluster(Allocation("999999999", (ME,), 0, 1), temp_root=temp_root, log_dir=tmp_path / "logs", timeout_s=30)
    try:
        with pytest.raises(ClusterError) as err:
            rc.start()
    finally:
        shutil.rmtree(temp_root, ignore_errors=True)
    assert re.search(
        r"Ray node 0 on \S+ exited with code|cannot start Ray node 0|did not reach 1 node", str(err.value)
    ), str(err.value)
    assert "RAY_ADDRESS" not in os.environ
    assert cluster.leftover_pids(temp_root) == []


def _bwrap_usable() -> bool:
    return (
        bool(shutil.which("bwrap"))
        and subprocess.run(["bwrap", "--dev-bind", "/", "/", "true"], capture_output=True).returncode == 0
    )


@pytest.mark.skipif(not _bwrap_usable(), reason="needs bwrap to mount a hosts file over /etc/hosts")
def test_ray_head_address_is_never_loopback_with_hostname_on_127_0_1_1(tmp_path):
    """Debian's /etc/hosts maps the host name to 127.0.1.1: the head must still announce a routable address."""
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.1.1 {socket.gethostname()} {ME}\n")
    code = (
        "import json, socket; from codegrpo.cluster import Allocation, RayCluster, head_address; "
        "me = socket.gethostname().split('.')[0]; "
        "plan = RayCluster(Allocation('9', (me, 'othernode'), 0, 1), port=30000).plan(); "
        "print(json.dumps([socket.gethostbyname(socket.gethostname()), head_address(me), plan[1][1]]))"
    )
    r = subprocess.run(
        ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(hosts), "/etc/hosts", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    resolved, head, worker_cmd = json.loads(r.stdout.strip().splitlines()[-1])
    assert resolved == "127.0.1.1"  # the hosts file is in effect
    assert not head.startswith("127.")
    assert _flag(worker_cmd, "--address") == f"{head}:30000"

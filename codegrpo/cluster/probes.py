"""Probes of a Ray cluster and of what it leaves on a host: the cluster's state read in a subprocess
(:func:`probe`), one task run on every node (:func:`run_probe_tasks`), the Ray processes still running under a
temp dir (:func:`leftover_pids`) and the permissions of that dir (:func:`private_paths`). The cluster itself is
:mod:`codegrpo.cluster.ray`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from codegrpo.cluster.slurm import ClusterError


def private_paths(root: Path | str) -> dict:
    """Permission summary of a Ray temp dir: its mode, its node dirs' modes, and the Unix sockets in it that other
    users could open (group or other write/read bits); what ``python -m codegrpo.cluster`` reports."""
    import stat as _stat

    root = Path(root)
    open_to_others = []
    sockets = files = files_open = 0
    for path in root.rglob("*"):
        try:
            st = path.lstat()
        except OSError:
            continue
        if _stat.S_ISSOCK(st.st_mode):
            sockets += 1
            if st.st_mode & 0o077:
                open_to_others.append(str(path))
        elif _stat.S_ISREG(st.st_mode):
            files += 1
            files_open += bool(st.st_mode & 0o077)
    return {
        "root": str(root),
        "root_mode": oct(root.stat().st_mode & 0o777),
        "node_dir_modes": sorted(
            {oct(p.stat().st_mode & 0o777) for p in root.iterdir() if p.is_dir() and p.name.startswith("n")}
        ),
        "sockets": sockets,
        "sockets_open_to_others": open_to_others,
        "files": files,
        "files_open_to_others": files_open,
    }


def leftover_pids(marker: Path | str) -> list[int]:
    """PIDs of this host's processes whose command line mentions ``marker`` (our Ray temp dir)."""
    marker = str(marker)
    skip = {os.getpid()}
    pid = os.getpid()
    while pid > 1:  # never the caller or its ancestors (their command lines may name the dir)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        skip.add(pid)
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


_PROBE = r"""
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
alive = [n for n in ray.nodes() if n.get("Alive")]
res = {"nodes": len(alive), "hosts": sorted({n["NodeManagerAddress"] for n in alive}),
       "node_ids": sorted(n["NodeID"] for n in alive),
       "CPU": sum(n["Resources"].get("CPU", 0) for n in alive),
       "GPU": sum(n["Resources"].get("GPU", 0) for n in alive)}
ray.shutdown()
print("PROBE " + json.dumps(res))
"""

# One task pinned to each alive node: proves that a driver joining through the environment (as verl's
# does) gets work run on every node, not only that the nodes registered.
_TASKS = r"""
import json, os, socket, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(logging_level="ERROR", log_to_driver=False)  # RAY_ADDRESS and RAY_AUTH_* from the environment

@ray.remote(num_cpus=1)
def where():
    return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
            "pid": os.getpid(), "gpus": ray.get_gpu_ids()}

nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
out = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
               for n in nodes], timeout=300)
ray.shutdown()
print("TASKS " + json.dumps(out))
"""


def run_probe_tasks(python: str = sys.executable, timeout_s: float = 600) -> list[dict]:
    """Run one task on every node of the cluster named by the environment; return where each ran."""
    proc = subprocess.run([python, "-c", _TASKS], capture_output=True, text=True, timeout=timeout_s)
    for line in proc.stdout.splitlines():
        if line.startswith("TASKS "):
            return json.loads(line[6:])
    raise ClusterError(f"tasks on the Ray cluster failed: {proc.stderr.strip()[-1000:]}")


def start_probe(address: str, *, python: str = sys.executable, token: str | None = None) -> subprocess.Popen:
    """Start reading the state of the Ray cluster at ``address`` in a subprocess (:func:`probe_result` reads it)."""
    env = dict(os.environ, RAY_ADDRESS=address)
    if token is not None:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    return subprocess.Popen(
        [python, "-c", _PROBE, address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def probe_result(address: str, proc: subprocess.Popen) -> dict:
    """What the probe started by :func:`start_probe` printed: alive nodes, hosts, CPUs, GPUs."""
    stdout, stderr = proc.communicate()
    for line in stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[6:])
    raise ClusterError(f"probe of {address} failed: {stderr.strip()[-500:]}")


def probe(address: str, *, timeout_s: float = 60.0, python: str = sys.executable, token: str | None = None) -> dict:
    """State of the Ray cluster at ``address`` (alive nodes, CPUs, GPUs), read in a subprocess.

    ``token``: the cluster's authentication token (None: take RAY_AUTH_* from the environment).
    """
    proc = start_probe(address, python=python, token=token)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise ClusterError(f"probe of {address} timed out") from exc
    return probe_result(address, proc)

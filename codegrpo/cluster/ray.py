"""A Ray cluster that spans a SLURM allocation (multi-node training), and the probes that check it.

:class:`RayCluster` (a context manager) starts the head on the node where the caller runs, one worker per other
node, each as its own job step (``srun --overlap --nodes=1 --ntasks=1 -w <node> ray start --block``, with the
node's GPUs); it waits until every node and every GPU (or CPU) is registered, exports ``RAY_ADDRESS`` while the
block runs, and stops every Ray process it started on exit. A test mode (``tasks_as_nodes=True`` of the
allocation) treats every SLURM *task* as a Ray node: distinct ports and temporary directories, CPU resources only.
The probes that read a running cluster's state are :mod:`codegrpo.cluster.probes`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from codegrpo.cluster.slurm import Allocation, ClusterError, current_allocation, nested_srun_env, step_srun
from codegrpo.cluster.probes import leftover_pids, probe_result, start_probe
from codegrpo.procgroup import popen_group, stop_group

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# Ray across the allocation
# --------------------------------------------------------------------------------------------------

_PORTS_PER_NODE = 10  # node manager, object manager, dashboard agent x2, metrics, runtime env agent
_WORKER_PORTS_PER_NODE = 400


_RAY_PORT_RANGE = (20000, 59000)  # random Ray base ports: above the usual service ports, below the ephemeral range


def port_base_free(base: int, n_ports: int, host: str = "") -> bool:
    """True when TCP ports ``base`` .. ``base + n_ports - 1`` can all be bound on this host now."""
    for port in range(base, base + n_ports):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def random_port_base(n_ports: int, *, tries: int = 200, rng: "random.Random | None" = None) -> int:
    """A random base port whose ``n_ports`` consecutive ports are free on this host (the Ray head's GCS port and
    the ports that follow it). Random, so that two jobs sharing a node do not collide on a fixed 6379."""
    rng = rng or random.SystemRandom()
    lo, hi = _RAY_PORT_RANGE
    for _ in range(tries):
        base = rng.randrange(lo, hi - n_ports)
        if port_base_free(base, n_ports):
            return base
    raise ClusterError(f"no {n_ports} consecutive free TCP ports found in {lo}-{hi} after {tries} tries")


@dataclass
class _RayNode:
    index: int
    host: str
    cmd: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None


def _short_host() -> str:
    return socket.gethostname().split(".")[0]


def _is_loopback(ip: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(ip).is_loopback


def head_address(host: str) -> str:
    """A routable IPv4 address of ``host`` (the Ray head, this node) that other nodes can reach; never loopback.

    ``socket.gethostbyname`` returns 127.0.1.1 on many clusters (Debian's /etc/hosts maps the host name to it):
    a Ray head announced there is unreachable from every other node. The host's non-loopback addresses from
    the resolver come first; else the address of the interface this host routes through (a UDP socket's
    ``connect`` chooses it; nothing is sent); else :class:`ClusterError`."""
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET)
    except OSError:
        infos = []
    for info in infos:
        ip = info[4][0]
        if not _is_loopback(ip):
            return ip
    ip = None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
    except OSError:
        ip = None
    if ip and not _is_loopback(ip) and ip != "0.0.0.0":
        return ip
    raise ClusterError(
        f"no non-loopback address for the Ray head {host} (the resolver gives "
        f"{sorted({i[4][0] for i in infos}) or 'nothing'}); map the host name to the node's "
        f"network address in /etc/hosts or DNS"
    )


@dataclass
class RayCluster:
    """A Ray cluster over a SLURM :class:`Allocation`; use as a context manager.

    ``port``: the head's GCS port; the other Ray ports follow it (``port+1`` ...), shifted per node
    when several Ray nodes share a host; 0 (the default) picks a random base whose ports are free on this host.
    ``temp_root``: node-local directory for Ray's session files (default
    ``<temp_base>/codegrpo-ray-<job>-<random>``, ``temp_base`` ``/tmp``; keep it short, Ray puts Unix sockets in
    it); every Ray process runs with umask 077, so it and its sockets are private to the user on every node.
    ``log_dir``: where the ``ray start`` output of every node goes (default: under ``temp_root``).
    ``cpu_only``: ask SLURM for no GPUs and announce none (the test mode, or CPU training across nodes).
    ``node_resources``: what every node announces to Ray instead of its SLURM share, for CPU training across
    nodes: ``num_gpus`` (device slots a CPU trainer schedules on, none of them asked of SLURM), ``num_cpus``
    (logical CPUs) and ``resources`` (custom resources). Keys left out keep the allocation's values.
    ``timeout_s``: how long to wait for every node (and GPU/CPU) to register.
    """

    allocation: Allocation
    port: int = 0
    temp_root: Path | None = None
    temp_base: Path | str = "/tmp"
    log_dir: Path | None = None
    cpu_only: bool = False
    node_resources: dict | None = None
    timeout_s: float = 300.0
    object_store_memory: int | None = None
    python: str = sys.executable
    address: str | None = field(default=None, init=False)
    _nodes: list[_RayNode] = field(default_factory=list, init=False, repr=False)
    _saved_env: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)
    _auth_token: str = field(default_factory=lambda: secrets.token_hex(32), init=False, repr=False)

    # ---- planning ---------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        if self.temp_root is None:
            self.temp_root = Path(self.temp_base) / f"codegrpo-ray-{self.allocation.job_id}-{secrets.token_hex(3)}"
        self.temp_root = Path(self.temp_root)
        if not self.port:
            self.port = random_port_base(self._ports_needed())
        self.log_dir = Path(self.log_dir) if self.log_dir else self.temp_root / "logs"
        self.ray_bin = str(Path(self.python).with_name("ray"))
        if not Path(self.ray_bin).exists():
            self.ray_bin = shutil.which("ray") or "ray"

    @property
    def env(self) -> dict[str, str]:
        """Environment a Ray driver needs to join this cluster (``ray.init()`` reads it).

        A token made for this cluster is exported with ``RAY_AUTH_MODE=token``: Ray releases with token
        authentication enforce it, but Ray <= 2.47 (what vLLM 0.8.5 allows) ignores both variables, so there
        the cluster is protected only by its random port, its private temp dir and the nodes' network
        (docs/cluster.md).
        """
        if self.address is None:
            raise ClusterError("Ray cluster not started")
        return {"RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self._auth_token}

    def _ports_needed(self) -> int:
        """Ports from ``port`` on that this host's Ray node(s) use (GCS, the per-node ports, worker ranges)."""
        if self.allocation.same_host:
            return 1000 + self.allocation.nnodes * _WORKER_PORTS_PER_NODE
        return 1 + _PORTS_PER_NODE

    @property
    def gpus_per_node(self) -> int:
        """GPUs each node's job step asks of SLURM."""
        return 0 if self.cpu_only else self.allocation.gpus_per_node

    @property
    def ray_gpus_per_node(self) -> int:
        """GPUs each Ray node announces (``node_resources`` may announce device slots SLURM did not give)."""
        return int((self.node_resources or {}).get("num_gpus", self.gpus_per_node))

    @property
    def ray_cpus_per_node(self) -> int:
        """CPUs each Ray node announces."""
        return int((self.node_resources or {}).get("num_cpus", self.allocation.cpus_per_node))

    def _ordered_hosts(self) -> list[str]:
        """Allocation nodes with the local host first (the head runs where the driver runs)."""
        nodes = list(self.allocation.nodes)
        me = _short_host()
        short = [n.split(".")[0] for n in nodes]
        if me in short:
            i = short.index(me)
            nodes.insert(0, nodes.pop(i))
        else:
            raise ClusterError(
                f"this host ({me}) is not in the allocation {nodes}; the Ray head must run on a node of the job"
            )
        return nodes

    def _node_cmd(self, index: int, head_ip: str) -> list[str]:
        shift = index * _PORTS_PER_NODE if self.allocation.same_host else 0
        base = self.port + 1 + shift
        cmd = [
            self.ray_bin,
            "start",
            "--block",
            "--disable-usage-stats",
            f"--num-cpus={self.ray_cpus_per_node}",
            f"--num-gpus={self.ray_gpus_per_node}",
            f"--node-manager-port={base}",
            f"--object-manager-port={base + 1}",
            f"--dashboard-agent-listen-port={base + 2}",
            f"--dashboard-agent-grpc-port={base + 3}",
            f"--metrics-export-port={base + 4}",
            f"--runtime-env-agent-port={base + 5}",
        ]
        if self.allocation.same_host:
            lo = self.port + 1000 + index * _WORKER_PORTS_PER_NODE
            cmd += [f"--min-worker-port={lo}", f"--max-worker-port={lo + _WORKER_PORTS_PER_NODE - 1}"]
        custom = (self.node_resources or {}).get("resources")
        if custom:
            cmd.append(f"--resources={json.dumps(custom, sort_keys=True)}")
        if self.object_store_memory:
            cmd.append(f"--object-store-memory={self.object_store_memory}")
        temp_dir = self.temp_root / (f"n{index}" if self.allocation.same_host else "n")
        cmd.append(f"--temp-dir={temp_dir}")
        if index == 0:
            cmd += [
                "--head",
                f"--port={self.port}",
                f"--node-ip-address={head_ip}",
                "--include-dashboard=false",
                f"--ray-client-server-port={base + 6}",
            ]
        else:
            cmd.append(f"--address={head_ip}:{self.port}")
        return cmd

    def plan(self) -> list[tuple[str, list[str]]]:
        """The (host, command) of every Ray node, head first, without starting anything.

        Every node, the head included, is a job step of its own (``srun --overlap``) that asks for the
        node's CPUs, memory and GPUs explicitly: the step the caller runs in may hold neither the GPUs
        nor the other nodes.
        """
        hosts = self._ordered_hosts()
        head_ip = head_address(hosts[0])
        plans = []
        for i, host in enumerate(hosts):
            srun = step_srun(
                host=host,
                cpus_per_task=self.allocation.cpus_per_node,
                gpus_per_node=self.gpus_per_node,
                job_name=f"ray-{'head' if i == 0 else f'worker-{i}'}",
            )
            plans.append((host, srun + self._node_cmd(i, head_ip)))
        return plans

    # ---- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "RayCluster":
        if self._nodes:
            raise ClusterError("Ray cluster already started")
        t0 = time.monotonic()
        plans = self.plan()
        head_ip = head_address(plans[0][0])
        self.address = f"{head_ip}:{self.port}"
        self.temp_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.temp_root.chmod(0o700)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log.info(
            "starting Ray on %d node(s) %s (job %s, %d GPU(s)/node announced), head %s",
            len(plans),
            [h for h, _ in plans],
            self.allocation.job_id,
            self.ray_gpus_per_node,
            self.address,
        )
        try:
            for i, (host, cmd) in enumerate(plans):
                node = _RayNode(i, host, cmd, self.log_dir / f"ray-node{i}-{host}.log")
                env = nested_srun_env()
                env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self._auth_token)
                # The cluster lives exactly as long as the training: no drain phase on SIGTERM.
                env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
                with open(node.log_path, "ab") as out:
                    try:
                        # umask 077: srun hands it to the tasks on every node, so Ray's session dir and
                        # Unix sockets are the user's alone (Ray <= 2.47 has no authentication of its own)
                        node.proc = popen_group(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, umask=0o077)
                    except FileNotFoundError as exc:
                        raise ClusterError(f"cannot start Ray node {i} on {host}: {exc}") from exc
                self._nodes.append(node)
                if i == 0:
                    self._wait_ready(1, started=t0)  # workers need a live GCS
            self._wait_ready(len(plans), started=t0)
        except BaseException:
            self.stop()
            raise
        for key, value in self.env.items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = value
        log.info("Ray cluster ready at %s: %d node(s) in %.1fs", self.address, len(plans), time.monotonic() - t0)
        return self

    def _check_alive(self) -> None:
        for node in self._nodes:
            if node.proc is not None and node.proc.poll() is not None:
                tail = node.log_path.read_text(errors="replace")[-2000:] if node.log_path.exists() else ""
                raise ClusterError(
                    f"Ray node {node.index} on {node.host} exited with code {node.proc.returncode} "
                    f"(log {node.log_path}):\n{tail}"
                )

    def _wait_ready(self, n_nodes: int, *, started: float) -> dict:
        """Block until ``n_nodes`` are alive with their GPUs (or CPUs), or raise after the timeout.

        A probe runs in a subprocess while the Ray nodes are watched, so a node that dies is reported
        at once, not after the probe gives up.
        """
        want_gpus = n_nodes * self.ray_gpus_per_node
        want_cpus = n_nodes * self.ray_cpus_per_node
        last = "no answer yet"
        running: subprocess.Popen | None = None
        probe_started = 0.0
        try:
            while True:
                self._check_alive()
                now = time.monotonic()
                if now - started > self.timeout_s:
                    raise ClusterError(
                        f"Ray cluster at {self.address} did not reach {n_nodes} node(s) / {want_gpus} "
                        f"GPU(s) / {want_cpus} CPU(s) within {self.timeout_s:.0f}s (last probe: {last}); "
                        f"logs in {self.log_dir}"
                    )
                if running is None:
                    running = start_probe(self.address, python=self.python, token=self._auth_token)
                    probe_started = now
                elif running.poll() is not None:
                    try:
                        state = probe_result(self.address, running)
                    except ClusterError as exc:
                        last = str(exc)
                        log.debug("probe: %s", exc)
                    else:
                        last = json.dumps(state)
                        if state["nodes"] >= n_nodes and state["GPU"] >= want_gpus and state["CPU"] >= want_cpus:
                            return state
                    running = None
                elif now - probe_started > 60:
                    running.kill()
                    running.communicate()
                    last = f"probe of {self.address} timed out"
                    running = None
                time.sleep(0.5)
        finally:
            if running is not None and running.poll() is None:
                running.kill()
                running.communicate()

    def stop(self) -> None:
        """Stop every Ray node this object started (workers first), and restore ``RAY_ADDRESS``."""
        for node in reversed(self._nodes):
            proc = node.proc
            if proc is None or proc.poll() is not None:
                continue
            if stop_group(proc, grace_s=30):
                log.warning("Ray node %d on %s ignored SIGTERM for 30 s; killed", node.index, node.host)
        # Ray processes that outlived their `ray start` parent (same host only): they carry our
        # unique temp dir on their command line.
        for pid in leftover_pids(self.temp_root):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._nodes:
            log.info("Ray cluster at %s stopped", self.address)
        self._nodes.clear()
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()

    def __enter__(self) -> "RayCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class multinode_ray:  # noqa: N801 - used like a function: ``with multinode_ray() as rc:``
    """``with multinode_ray(...) as rc:``: a :class:`RayCluster` in a multi-node SLURM job, else ``None``.

    Outside SLURM, or in a one-node job, verl starts its own local Ray and ``rc`` is ``None``.
    Keyword arguments go to :class:`RayCluster`; ``tasks_as_nodes`` to :func:`current_allocation`.
    """

    def __init__(self, *, tasks_as_nodes: bool = False, **kwargs) -> None:
        self.tasks_as_nodes = tasks_as_nodes
        self.kwargs = kwargs
        self.cluster: RayCluster | None = None

    def __enter__(self) -> RayCluster | None:
        if not (os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID")):
            return None
        alloc = current_allocation(tasks_as_nodes=self.tasks_as_nodes)
        if alloc.nnodes < 2:
            return None
        self.cluster = RayCluster(alloc, **self.kwargs)
        return self.cluster.start()

    def __exit__(self, *exc) -> None:
        if self.cluster is not None:
            self.cluster.stop()

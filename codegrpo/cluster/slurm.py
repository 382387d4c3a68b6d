"""SLURM allocations: host lists, the job's nodes, GPUs and CPUs, and the flags of job steps started inside a job.

* :func:`current_allocation` reads the job's allocation: node names (``SLURM_JOB_NODELIST`` expanded with
  ``scontrol show hostnames``), GPUs and CPUs per node (from ``scontrol show job``);
* :func:`step_srun`, :func:`nested_srun_env`, :func:`unset_prefix`: ``srun`` of a job step started from inside the
  rule's own job step (Ray nodes, multi-node torchrun).

Nothing here imports Snakemake, Ray or verl.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

log = logging.getLogger(__name__)


class ClusterError(RuntimeError):
    """The SLURM allocation cannot be read, or the Ray cluster did not come up."""


# --------------------------------------------------------------------------------------------------
# Host lists and per-node counts
# --------------------------------------------------------------------------------------------------


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ClusterError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ClusterError(f"unbalanced '[' in host list {text!r}")
    parts.append("".join(cur))
    return [p for p in parts if p]


def _expand_range_group(group: str, hostlist: str) -> list[str]:
    out = []
    for item in group.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item.strip())
        if not m:
            raise ClusterError(f"bad range {item!r} in host list {hostlist!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise ClusterError(f"descending range {item!r} in host list {hostlist!r}")
        width = len(lo)
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


def _expand_hostlist_py(hostlist: str) -> list[str]:
    hosts: list[str] = []
    for part in _split_top_level(hostlist.strip()):
        names = [""]
        for literal, group in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", part):
            expansions = _expand_range_group(group, hostlist) if group else [""]
            names = [n + literal + e for n in names for e in expansions]
        hosts.extend(names)
    return hosts


def expand_hostlist(hostlist: str, *, use_scontrol: bool = True) -> list[str]:
    """Expand a SLURM host list (``node[01-03],gpu7``) into host names, in order.

    Uses ``scontrol show hostnames`` when it is on PATH (the authority on the syntax); otherwise a
    built-in parser of the same syntax (comma lists, ``[a-b,c]`` ranges with zero padding, several
    bracket groups per name).
    """
    if not hostlist or not hostlist.strip():
        raise ClusterError("empty SLURM host list")
    if use_scontrol and shutil.which("scontrol"):
        proc = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True, timeout=60)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.split()
        log.warning("scontrol show hostnames %r failed (%s); using the built-in parser", hostlist, proc.stderr.strip())
    return _expand_hostlist_py(hostlist)


def expand_counts(spec: str) -> list[int]:
    """Expand SLURM's compressed per-node counts, e.g. ``8(x2),4`` -> ``[8, 8, 4]``."""
    out: list[int] = []
    for item in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not m:
            raise ClusterError(f"bad SLURM count list {spec!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


# --------------------------------------------------------------------------------------------------
# The allocation
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    """What a SLURM job holds, seen as Ray nodes.

    ``nodes`` has one entry per Ray node (a host name; the same host repeated in the one-host test
    mode). ``gpus_per_node`` and ``cpus_per_node`` are what each Ray node announces.
    """

    job_id: str
    nodes: tuple[str, ...]
    gpus_per_node: int
    cpus_per_node: int
    tasks_as_nodes: bool = False

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def same_host(self) -> bool:
        """True when several Ray nodes share one host (test mode): they need distinct ports/dirs."""
        return len(set(self.nodes)) < len(self.nodes)


def parse_job_record(text: str) -> dict[str, str]:
    """Parse ``scontrol show job -o <id>`` output (space-separated ``Key=Value`` pairs)."""
    record: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            record[key] = value
    if "JobId" not in record:
        raise ClusterError(f"not a scontrol job record: {text[:200]!r}")
    return record


def _gpu_count(tres: str) -> int | None:
    """GPUs in a TRES string: ``gres:gpu:8``, ``gres/gpu:a100=8``, ``gpu:a100:2`` (summed over types)."""
    if not tres or tres in ("(null)", "N/A"):
        return None
    total, found = 0, False
    for item in tres.split(","):
        m = re.fullmatch(r"(?:gres[:/])?gpu(?::[\w.-]+)?[:=](\d+)", item.strip())
        if m:
            total += int(m.group(1))
            found = True
    return total if found else None


def _job_record(job_id: str) -> dict[str, str] | None:
    if not shutil.which("scontrol"):
        return None
    proc = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        log.warning("scontrol show job %s failed: %s", job_id, proc.stderr.strip())
        return None
    return parse_job_record(proc.stdout)


def allocation_from(env: dict[str, str], record: dict[str, str] | None, *, tasks_as_nodes: bool = False) -> Allocation:
    """Build the :class:`Allocation` from the job environment and its ``scontrol`` record.

    The record wins where both exist: inside a job *step* (where the rule's code runs under the
    Snakemake SLURM executor) the ``SLURM_*`` variables describe the step, not the job.
    """
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or (record or {}).get("JobId")
    if not job_id:
        raise ClusterError("not inside a SLURM job (SLURM_JOB_ID is not set)")
    record = record or {}
    hostlist = record.get("NodeList") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not hostlist or hostlist == "(null)":
        raise ClusterError(f"SLURM job {job_id}: no node list (job not running?)")
    hosts = expand_hostlist(hostlist)

    # CPUs per host: the job's cpus per node (compressed list), else NumCPUs / nodes.
    cpus_spec = env.get("SLURM_JOB_CPUS_PER_NODE")
    if cpus_spec:
        cpus_per_host = min(expand_counts(cpus_spec))
    elif record.get("NumCPUs", "").isdigit():
        cpus_per_host = max(1, int(record["NumCPUs"]) // len(hosts))
    else:
        cpus_per_host = 1

    # GPUs per host: per-node request, else per-job request / nodes, else the environment.
    gpus_per_host = _gpu_count(record.get("TresPerNode", ""))
    if gpus_per_host is None:
        per_job = _gpu_count(record.get("TresPerJob", ""))
        if per_job is None:
            per_job = _gpu_count(record.get("AllocTRES", "")) or _gpu_count(record.get("TRES", ""))
        if per_job is not None:
            if per_job % len(hosts):
                raise ClusterError(
                    f"SLURM job {job_id}: {per_job} GPUs over {len(hosts)} nodes is uneven; "
                    "request GPUs per node (gres gpu:N with nodes: k)"
                )
            gpus_per_host = per_job // len(hosts)
    if gpus_per_host is None:
        gpus_per_host = int(env.get("SLURM_GPUS_ON_NODE") or 0)

    if not tasks_as_nodes:
        return Allocation(job_id, tuple(hosts), gpus_per_host, cpus_per_host)

    # Test mode: one Ray node per task (CPU only).
    # the job's tasks: its record first (inside a job step, where Snakemake's executor runs the rule with
    # `srun -n1`, the SLURM_*TASKS* variables describe the step's single task), else the environment
    tasks_spec = env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_STEP_TASKS_PER_NODE")
    if record.get("NumTasks", "").isdigit():
        n = int(record["NumTasks"])
        per_host = [n // len(hosts)] * len(hosts)
    elif tasks_spec:
        per_host = expand_counts(tasks_spec)
    else:
        per_host = [1] * len(hosts)
    nodes = tuple(h for h, n in zip(hosts, per_host) for _ in range(max(1, n)))
    cpt = env.get("SLURM_CPUS_PER_TASK") or record.get("CPUs/Task") or "1"
    cpus = int(cpt) if cpt.isdigit() else 1
    return Allocation(job_id, nodes, 0, cpus, tasks_as_nodes=True)


def current_allocation(env: dict[str, str] | None = None, *, tasks_as_nodes: bool = False) -> Allocation:
    """The allocation of the SLURM job this process runs in (:class:`ClusterError` outside a job)."""
    env = dict(os.environ if env is None else env)
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        raise ClusterError("not inside a SLURM job (SLURM_JOB_ID is not set)")
    return allocation_from(env, _job_record(job_id), tasks_as_nodes=tasks_as_nodes)


_KEEP_SLURM = frozenset({"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF", "SLURM_CLUSTER_NAME"})


def nested_srun_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for an ``srun`` started inside a job step: the job id stays, the enclosing step's geometry
    (``SLURM_NTASKS``, ``SLURM_MEM_PER_CPU``, ``SLURM_CPUS_PER_TASK``, ``SRUN_*`` ...) goes, so it cannot
    contradict the new step's own flags (e.g. ``--mem`` with an inherited ``SLURM_MEM_PER_CPU`` is an error)."""
    environ = os.environ if environ is None else environ
    return {
        k: v for k, v in environ.items() if not (k.startswith(("SLURM_", "SRUN_", "SBATCH_")) and k not in _KEEP_SLURM)
    }


def unset_prefix(environ: dict[str, str] | None = None) -> list[str]:
    """``env -u VAR ...`` removing what :func:`nested_srun_env` drops, for a command line that runs ``srun``
    through a launcher that only adds variables."""
    environ = os.environ if environ is None else environ
    drop = sorted(k for k in environ if k not in nested_srun_env(environ))
    return ["env", *[x for k in drop for x in ("-u", k)]] if drop else []


def step_srun(
    *,
    nodes: int = 1,
    ntasks: int = 1,
    ntasks_per_node: int | None = None,
    host: str | None = None,
    cpus_per_task: int | None = None,
    gpus_per_node: int = 0,
    job_name: str | None = None,
) -> list[str]:
    """``srun`` flags of a job step started from inside the rule's own job step (Ray nodes, multi-node torchrun).

    * ``--overlap``: the Snakemake job step already holds the node's CPUs; without it the new step waits for them
      forever;
    * ``--cpus-per-task`` (the node's CPUs for one task per node) and ``--mem=0`` (all of the job's memory on the
      node): explicit, so nothing is inherited from the enclosing step;
    * GPU binding: ``--gres=gpu:N`` gives the step the node's N GPUs (the Snakemake step may hold none: the
      executor plugin's job step asks for ``--gpus`` only on one-node jobs), and ``--gpu-bind=none`` keeps all
      N visible to the one task per node (torchrun / Ray split them among their own processes);
    * ``--kill-on-bad-exit=1``: a task that fails ends the step.
    """
    cmd = ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={ntasks}"]
    if ntasks_per_node:
        cmd.append(f"--ntasks-per-node={ntasks_per_node}")
    if host:
        cmd += ["-w", host]
    if cpus_per_task:
        cmd.append(f"--cpus-per-task={cpus_per_task}")
    cmd += ["--mem=0", "--kill-on-bad-exit=1"]
    if job_name:
        cmd.append(f"--job-name={job_name}")
    if gpus_per_node:
        cmd += [f"--gres=gpu:{gpus_per_node}", "--gpu-bind=none"]
    return cmd

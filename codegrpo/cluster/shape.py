"""Do the jobs fit the cluster's nodes? The resources each stage asks for against what ``sinfo`` reports.

A stage that asks for more memory, CPUs or GPUs per node than any node of its partition has (or for more such
nodes than the partition holds) stays pending for ever: SLURM accepts the job and never schedules it, or
refuses it only at submission, after the jobs before it have run for days. The smoke test asks for one GPU and
120 GB, so it passes on clusters where the training stages (8 GPUs, 480 GB, 64 CPUs per node in
``config/paper.yaml``) can never run. This module compares, at plan time:

* :func:`read_nodes`: the nodes of the cluster, one :class:`Node` per (partition, node) from
  ``sinfo -N -h -o "%P|%N|%c|%m|%G"`` (:func:`parse_sinfo`);
* :func:`check_request`: one job's request (partition, nodes, CPUs per task, memory per node, GPUs per node and
  model) against them; a problem names what is short, the largest value the partition offers, and the key to
  change;
* :func:`check_config`: every stage of a config (``python -m codegrpo.cluster check``);
* the preflight checks every job a real run submits (``rules/common.smk``'s ``onstart``) the same way.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping

from codegrpo.cluster.resources import stage_resources

SINFO_FORMAT = "%P|%N|%c|%m|%G"
# the stages whose jobs the workflow submits (rules' stage_resources names)
STAGES = ("data", "sft", "skeleton_rl", "skin_rl", "dhrcl", "evaluate", "tables", "smoke")


@dataclasses.dataclass(frozen=True)
class Node:
    partition: str
    name: str
    cpus: int
    mem_mb: int
    gpus: int = 0
    gpu_model: str | None = None
    default: bool = False  # the partition is the cluster's default (sinfo marks it with '*')


def _gres_gpus(gres: str) -> tuple[int, str | None]:
    """(count, model) of the GPUs in a gres string: ``gpu:a100:8(S:0-1)``, ``gpu:8``, ``(null)``."""
    count, model = 0, None
    for item in gres.split(","):
        item = re.sub(r"\(.*?\)", "", item.strip())
        parts = item.split(":")
        if parts and parts[0] == "gpu" and parts[-1].isdigit():
            count += int(parts[-1])
            if len(parts) == 3:
                model = parts[1]
    return count, model


def parse_sinfo(text: str) -> list[Node]:
    """Nodes from ``sinfo -N -h -o "%P|%N|%c|%m|%G"`` output (memory in MB; ``partition*`` is the default)."""
    nodes = []
    for ln, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 5:
            raise ValueError(f"sinfo line {ln}: expected 5 fields (partition|node|cpus|memory|gres), got {line!r}")
        part, name, cpus, mem, gres = fields
        gpus, model = _gres_gpus(gres)
        mem_mb = int(re.sub(r"\D.*$", "", mem) or 0)
        nodes.append(
            Node(
                part.rstrip("*"),
                name,
                int(re.sub(r"\D.*$", "", cpus) or 0),
                mem_mb,
                gpus,
                model,
                default=part.endswith("*"),
            )
        )
    return nodes


def read_nodes(sinfo: str = "sinfo") -> list[Node] | None:
    """The cluster's nodes, or None where ``sinfo`` is not on PATH (not a SLURM login node)."""
    exe = shutil.which(sinfo)
    if exe is None:
        return None
    out = subprocess.run([exe, "-N", "-h", "-o", SINFO_FORMAT], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"sinfo failed ({out.returncode}): {out.stderr.strip()}")
    return parse_sinfo(out.stdout)


def _gpu_request(res: Mapping) -> tuple[int, str | None]:
    if res.get("gres"):
        return _gres_gpus(str(res["gres"]))
    return int(res.get("gpu") or 0), res.get("gpu_model")


def check_request(what: str, res: Mapping, nodes: Iterable[Node], *, key: str) -> list[str]:
    """Problems of one job's resources ``res`` (stage_resources' keys) against ``nodes``; ``what`` names the job,
    ``key`` the config section to change (``cluster.stages.<stage>``)."""
    nodes = list(nodes)
    part = res.get("slurm_partition")
    pool = [n for n in nodes if n.partition == part] if part else [n for n in nodes if n.default]
    where = f"partition {part!r}" if part else "the default partition"
    if not pool:
        known = sorted({n.partition for n in nodes})
        return [
            f"{what}: {where} has no nodes in sinfo (partitions: {known}); set cluster.partition / "
            f"cluster.cpu_partition / {key}.partition"
        ]
    want_nodes = int(res.get("nodes") or 1)
    tasks = int(res.get("tasks") or 1)
    want_cpus = int(res.get("cpus_per_task") or 1) * (tasks if want_nodes == 1 else 1)
    want_mem = int(res.get("mem_mb") or 0)
    want_gpus, model = _gpu_request(res)
    fit = [
        n
        for n in pool
        if n.cpus >= want_cpus
        and n.mem_mb >= want_mem
        and n.gpus >= want_gpus
        and (not model or not want_gpus or n.gpu_model == model)
    ]
    if len(fit) >= want_nodes:
        return []
    problems = []
    if max(n.cpus for n in pool) < want_cpus:
        problems.append(
            f"{want_cpus} CPUs per node (the largest node of {where} has {max(n.cpus for n in pool)}; "
            f"{key}.cpus_per_task)"
        )
    if max(n.mem_mb for n in pool) < want_mem:
        problems.append(
            f"{want_mem} MB per node (the largest node of {where} has {max(n.mem_mb for n in pool)} MB; {key}.mem_mb)"
        )
    if want_gpus and max(n.gpus for n in pool) < want_gpus:
        problems.append(
            f"{want_gpus} GPUs per node (the most on a node of {where} is {max(n.gpus for n in pool)}; "
            f"the stage's n_gpus_per_node, or {key}.gpu)"
        )
    if model and want_gpus and not any(n.gpu_model == model for n in pool):
        models = sorted({n.gpu_model for n in pool if n.gpu_model})
        problems.append(f"GPU model {model!r} (models in {where}: {models}; cluster.gpu_model)")
    if not problems:
        problems.append(
            f"{want_nodes} nodes that each fit the request, but {where} has {len(fit)} (the stage's nnodes)"
        )
    return [f"{what} asks for " + "; ".join(problems) + ", so SLURM could never schedule it"]


def check_config(cfg: Mapping, nodes: Iterable[Node], stages: Iterable[str] = STAGES) -> list[str]:
    """Problems of every stage's jobs of ``cfg`` against the nodes (stages the config does not have are skipped)."""
    nodes = list(nodes)
    out = []
    for stage in stages:
        if stage not in ("data", "tables", "evaluate", "smoke") and stage not in cfg:
            continue
        out += check_request(f"stage {stage}", stage_resources(dict(cfg), stage), nodes, key=f"cluster.stages.{stage}")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m codegrpo.cluster check --configfile config/paper.yaml site.yaml [--sinfo-file F]``: print
    every stage's request against the cluster's nodes; exit 1 when a stage cannot be scheduled."""
    import argparse
    import json

    import yaml

    from codegrpo.config import merge_layers, validate_config

    ap = argparse.ArgumentParser(prog="python -m codegrpo.cluster check", description=main.__doc__)
    ap.add_argument("--configfile", nargs="+", required=True, help="config files, later ones over earlier ones")
    ap.add_argument("--sinfo-file", help=f"saved output of sinfo -N -h -o '{SINFO_FORMAT}' instead of running sinfo")
    args = ap.parse_args(argv)
    cfg: dict = {}
    for path in args.configfile:
        with open(path, encoding="utf-8") as fh:
            merge_layers(cfg, yaml.safe_load(fh) or {})
    validate_config(cfg, " + ".join(args.configfile))
    if args.sinfo_file:
        with open(args.sinfo_file, encoding="utf-8") as fh:
            nodes = parse_sinfo(fh.read())
    else:
        nodes = read_nodes()
        if nodes is None:
            print("sinfo is not on PATH: run this on the cluster's login node (or pass --sinfo-file)")
            return 2
    for stage in STAGES:
        if stage in ("data", "tables", "evaluate", "smoke") or stage in cfg:
            res = stage_resources(cfg, stage)
            print(f"{stage}: " + json.dumps({k: res[k] for k in sorted(res)}))
    problems = check_config(cfg, nodes)
    for p in problems:
        print("PROBLEM " + p)
    print(
        f"{len(nodes)} node entries checked; "
        + ("every stage fits" if not problems else f"{len(problems)} stage(s) cannot be scheduled")
    )
    return 1 if problems else 0


def check_jobs(jobs: Iterable[tuple[str, Mapping]], nodes: list[Node] | None = None) -> list[str]:
    """Problems of the jobs a run will submit, each (rule name, its resources), against the cluster's nodes
    (read with sinfo when not given; no sinfo on PATH: nothing to check against, no problems). Rules with the
    same request are checked once."""
    if nodes is None:
        nodes = read_nodes()
        if nodes is None:
            return []
    keys = ("slurm_partition", "nodes", "tasks", "cpus_per_task", "mem_mb", "gpu", "gpu_model", "gres")
    seen: dict[tuple, list[str]] = {}
    out = []
    for rule, res in jobs:
        sig = (rule, *(res.get(k) for k in keys))
        if sig in seen:
            continue
        seen[sig] = check_request(f"rule {rule}", res, nodes, key="cluster.stages.<its stage>")
        out += seen[sig]
    return out

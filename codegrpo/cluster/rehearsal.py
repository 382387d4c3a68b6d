"""The one-host rehearsal of a multi-node training stage (``cluster.rehearsal_tasks_as_nodes``, device cpu): a
real Ray cluster with every SLURM task of the job as a node, and the record of where the training workers ran."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Callable, Mapping

from codegrpo.io import write_json

log = logging.getLogger(__name__)


RAY_REHEARSAL_FILE = "ray_rehearsal.json"


@contextlib.contextmanager
def rehearsal_ray_cluster(cfg: Mapping, section: Mapping, node_resources: Callable[[int, int], dict]):
    """One-host rehearsal (``cluster.rehearsal_tasks_as_nodes``, device cpu): the multi-node Ray cluster of a
    stage with ``nnodes`` > 1, for real, with every SLURM task of the job as a Ray node (head here, the others
    through ``srun``). Each node announces the CPU-mode resources of ``n_gpus_per_node`` training workers
    (``node_resources(n_workers, num_cpus)``, the trainer adapter's :func:`codegrpo.verl.cpu.node_resources`), so verl, joining through ``RAY_ADDRESS``, must place its workers
    on every node. One task pinned to each node runs first.

    Yields the record (the driver's environment in ``record["env"]``, dropped before it is stored), or None
    outside a SLURM job, for a one-node stage or when not rehearsing."""
    from codegrpo.cluster import ClusterError, multinode_ray, run_probe_tasks

    cl = cfg.get("cluster", {})
    if (
        cfg["device"] != "cpu"
        or not cl.get("rehearsal_tasks_as_nodes")
        or section.get("import")
        or int(section.get("nnodes", 1)) < 2
    ):
        yield None
        return
    kw = {name: cl[key] for key, name in (("ray_port", "port"), ("ray_start_timeout_s", "timeout_s")) if key in cl}
    n_gpus = int(section.get("n_gpus_per_node", 1))
    with multinode_ray(
        tasks_as_nodes=True, cpu_only=True, node_resources=node_resources(n_gpus, 2 * n_gpus + 2), **kw
    ) as rc:
        if rc is None:
            yield None
            return
        alloc = rc.allocation
        tasks = run_probe_tasks(rc.python)
        record = {
            "job_id": alloc.job_id,
            "ray_nodes": alloc.nnodes,
            "hosts": list(alloc.nodes),
            "expected_nodes": int(section["nnodes"]),
            "address": rc.address,
            "tasks": tasks,
        }
        if record["ray_nodes"] != record["expected_nodes"] or len({t["node_id"] for t in tasks}) != record["ray_nodes"]:
            raise ClusterError(
                f"Ray rehearsal: {record['ray_nodes']} Ray nodes, {len(tasks)} tasks ran, "
                f"expected {record['expected_nodes']} (SLURM job {alloc.job_id})"
            )
        log.info("Ray rehearsal: %d nodes over SLURM job %s, tasks ran on %s", alloc.nnodes, alloc.job_id, tasks)
        yield {**record, "workers_per_node": n_gpus, "env": {"RAY_ADDRESS": rc.address}}


def write_ray_rehearsal(run_dir: Path, record: dict, workers_file: str) -> dict:
    """``<run_dir>/ray_rehearsal.json`` (temp file, renamed) after the run: the Ray cluster, the pinned tasks
    and where the trainer's workers ran (the run's ``workers_file``, written by the trainer adapter); fails when the workers did not span
    every node. Written once the run is done: before, the run-folder lifecycle would take it for a leftover."""
    from codegrpo.cluster import ClusterError

    record = {k: v for k, v in record.items() if k != "env"}
    workers_path = Path(run_dir) / workers_file
    workers = json.loads(workers_path.read_text(encoding="utf-8")) if workers_path.is_file() else None
    record["training_workers"] = workers
    record["training_nodes"] = workers["nodes"] if workers else 0
    if record["training_nodes"] != record["ray_nodes"]:
        raise ClusterError(
            f"Ray rehearsal: verl's training workers ran on {record['training_nodes']} of the "
            f"{record['ray_nodes']} Ray nodes ({workers_path}: {workers})"
        )
    write_json(Path(run_dir) / RAY_REHEARSAL_FILE, record)
    return record

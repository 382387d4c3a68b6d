"""``python -m codegrpo.cluster``: start Ray over the current SLURM job, print its state, stop it (see ``ray_check``);
``python -m codegrpo.cluster check --configfile ...``: every stage's resources against the cluster's nodes
(:mod:`codegrpo.cluster.shape`)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from codegrpo.cluster.probes import leftover_pids, private_paths, probe, run_probe_tasks
from codegrpo.cluster.ray import RayCluster
from codegrpo.cluster.slurm import current_allocation


def ray_check(argv: list[str] | None = None) -> int:
    """``python -m codegrpo.cluster [--tasks-as-nodes] [--cpu-only] [--port P] [--run-tasks]``.

    Starts Ray over the current SLURM job, prints the cluster state as JSON, then stops it: the check
    that a job's nodes can form one Ray cluster.
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m codegrpo.cluster", description=ray_check.__doc__)
    ap.add_argument(
        "--tasks-as-nodes",
        action="store_true",
        help="one Ray node per SLURM task (test mode on one host; implies --cpu-only)",
    )
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--port", type=int, default=0, help="GCS port of the head (0: a random free one)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--temp-root", default=None)
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--object-store-memory", type=int, default=None)
    ap.add_argument("--run-tasks", action="store_true", help="also run one task pinned to each node")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    alloc = current_allocation(tasks_as_nodes=args.tasks_as_nodes)
    print(
        "ALLOCATION "
        + json.dumps(
            {
                "job_id": alloc.job_id,
                "nodes": list(alloc.nodes),
                "nnodes": alloc.nnodes,
                "gpus_per_node": alloc.gpus_per_node,
                "cpus_per_node": alloc.cpus_per_node,
            }
        ),
        flush=True,
    )
    rc = RayCluster(
        alloc,
        port=args.port,
        timeout_s=args.timeout,
        cpu_only=args.cpu_only or args.tasks_as_nodes,
        temp_root=Path(args.temp_root) if args.temp_root else None,
        log_dir=Path(args.log_dir) if args.log_dir else None,
        object_store_memory=args.object_store_memory,
    )
    with rc:
        state = probe(rc.address, python=rc.python)  # joins like a driver would: from os.environ
        print("CLUSTER " + json.dumps({"address": rc.address, **state}), flush=True)
        print("PRIVATE " + json.dumps(private_paths(rc.temp_root)), flush=True)
        if args.run_tasks:
            print("TASKS " + json.dumps(run_probe_tasks(rc.python)), flush=True)
    left = leftover_pids(rc.temp_root)
    print("STOPPED " + json.dumps({"leftover_pids": left}), flush=True)
    return 0 if not left else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["check"]:
        from codegrpo.cluster.shape import main

        sys.exit(main(sys.argv[2:]))
    sys.exit(ray_check())

"""SLURM allocations and a Ray cluster that spans them (multi-node training).

Inside a multi-node SLURM job, verl needs one Ray cluster over every allocated node. This package

* reads the job's allocation (:func:`current_allocation`): node names (``SLURM_JOB_NODELIST`` expanded with
  ``scontrol show hostnames``), GPUs and CPUs per node (from ``scontrol show job``), and
* starts Ray across it (:class:`RayCluster`, a context manager): the head on the node where the caller runs,
  one worker per other node, each as its own job step (``srun --overlap --nodes=1 --ntasks=1 -w <node>
  ray start --block``, with the node's GPUs); it
  waits until every node and every GPU (or CPU) is registered, exports ``RAY_ADDRESS`` while the block runs,
  and stops every Ray process it started on exit.

The trainer maps :attr:`Allocation.nnodes` / :attr:`Allocation.gpus_per_node` to its own settings and lets
``ray.init()`` pick the address up from ``RAY_ADDRESS``. Nothing here imports Snakemake or verl.

A test mode (``tasks_as_nodes=True``) treats every SLURM *task* as a Ray node, so that a job with
``--ntasks=2`` on a single host exercises the whole bootstrap: the Ray nodes then get distinct ports and
temporary directories, and only CPU resources.

Modules: :mod:`.slurm` (the allocation, job-step flags), :mod:`.ray` (the Ray cluster), :mod:`.probes` (its probes),
:mod:`.resources` (a stage's SLURM resources from the config), :mod:`.shape` (requests against the nodes),
``__main__`` (``python -m codegrpo.cluster`` and ``... check``).
"""

from codegrpo.cluster.probes import leftover_pids, private_paths, probe, run_probe_tasks
from codegrpo.cluster.ray import RayCluster, head_address, multinode_ray, port_base_free, random_port_base
from codegrpo.cluster.slurm import (
    Allocation,
    ClusterError,
    allocation_from,
    current_allocation,
    expand_counts,
    expand_hostlist,
    nested_srun_env,
    parse_job_record,
    step_srun,
    unset_prefix,
)

__all__ = [
    "Allocation",
    "ClusterError",
    "RayCluster",
    "allocation_from",
    "current_allocation",
    "expand_counts",
    "expand_hostlist",
    "head_address",
    "leftover_pids",
    "multinode_ray",
    "nested_srun_env",
    "parse_job_record",
    "port_base_free",
    "private_paths",
    "probe",
    "random_port_base",
    "run_probe_tasks",
    "step_srun",
    "unset_prefix",
]

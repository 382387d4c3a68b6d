"""Tests that need a running Slurm cluster (`sudo scripts/local_slurm_up.sh` brings a one-node one up).

Every test here is marked ``slurm`` and is skipped, with the reason, when no cluster answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import copy_workflow
from tests.conftest import run_snakemake as shared_run_snakemake

REPO = Path(__file__).resolve().parents[2]
RESPONDING = ("idle", "mixed", "allocated", "completing")


def cluster_state() -> tuple[bool, str]:
    """(usable, reason): a controller answers and at least one node can run jobs."""
    if not shutil.which("sinfo") or not shutil.which("sbatch"):
        return False, "no Slurm client (sinfo/sbatch not on PATH); run `sudo scripts/local_slurm_up.sh`"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False, "sinfo timed out: slurmctld not answering"
    if proc.returncode != 0:
        return (
            False,
            f"no Slurm controller answering ({proc.stderr.strip()[:200]}); run `sudo scripts/local_slurm_up.sh`",
        )
    states = {s.strip().rstrip("*~#!%$@^-") for s in proc.stdout.split()}
    if not states & set(RESPONDING):
        return False, f"no Slurm node ready (node states: {sorted(states) or 'none'})"
    return True, ""


_USABLE, _REASON = cluster_state()


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slurm)
            item.add_marker(pytest.mark.slow)
            if not _USABLE:
                item.add_marker(pytest.mark.skip(reason=f"needs a Slurm cluster: {_REASON}"))


def node_gpus() -> int:
    """Number of gres GPUs on the first node (0 if none)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%G"], capture_output=True, text=True).stdout
    for item in out.split()[0].split(",") if out.split() else []:
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            return int(parts[-1])
    return 0


def wait_job(job_id: str, timeout_s: float = 300) -> str:
    """Poll squeue until the job reaches a final state; return it."""
    end = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < end:
        out = subprocess.run(
            ["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"], capture_output=True, text=True
        ).stdout.strip()
        state = out.splitlines()[0] if out else state
        if state in (
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
            "PREEMPTED",
            "BOOT_FAIL",
            "DEADLINE",
        ):
            return state
        time.sleep(1)
    subprocess.run(["scancel", job_id])
    raise AssertionError(f"SLURM job {job_id} did not finish within {timeout_s}s (last state {state!r})")


def sbatch(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(["sbatch", "--parsable", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def run_snakemake(workdir: Path, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess:
    """Snakemake in ``workdir`` through the shared runner (tests/conftest.py), with the run's lock (a copy of its
    own) and the venv's tools first on PATH (what the submitted jobs' environment inherits); killed after
    ``timeout_s`` so a hung executor cannot stall."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    return shared_run_snakemake(*args, cwd=workdir, timeout=timeout_s, lock=True, env=env)


@pytest.fixture
def workflow_copy(tmp_path) -> Path:
    return copy_workflow(tmp_path / "wf")

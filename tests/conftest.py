"""Shared fixtures: repository paths, the shipped data, and the CPU training chain (run once per session)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
VENV_BIN = Path(sys.executable).parent

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def copy_workflow(dest: Path, symlinks: bool = True) -> Path:
    """Copy the workflow (git-tracked and new, not ignored files; no tests) to ``dest``; links stay links, or are
    left out with ``symlinks=False``."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    dest.mkdir(parents=True, exist_ok=True)
    for rel in files:
        if not rel or rel.startswith("tests/"):
            continue
        src = REPO_ROOT / rel
        if not (src.exists() or src.is_symlink()) or (src.is_symlink() and not symlinks):
            continue  # deleted in the working tree, or a link left out
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        elif src.is_file():
            shutil.copy2(src, target)
    return dest


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA_DIR


def _snakemake_exe() -> str:
    exe = VENV_BIN / "snakemake"
    return str(exe) if exe.exists() else shutil.which("snakemake")


@pytest.fixture(scope="session")
def snakemake_bin() -> str:
    return _snakemake_exe()


def run_snakemake(
    *args: str,
    overlay: dict | None = None,
    tmp_path: Path | None = None,
    timeout: float = 900,
    cwd: Path = REPO_ROOT,
    lock: bool = False,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """The one way the tests run Snakemake: ``snakemake [--nolock] [--configfile OVERLAY] ARGS`` in ``cwd`` (the
    repository by default), output captured, killed after ``timeout`` seconds. ``overlay`` is written as YAML
    under ``tmp_path``; ``env`` replaces the inherited environment (tests/slurm: the venv's tools on PATH)."""
    cmd = [_snakemake_exe()] + ([] if lock else ["--nolock"])
    if overlay is not None:
        if tmp_path is None:
            raise ValueError("run_snakemake: an overlay needs tmp_path")
        cfg = tmp_path / "overlay.yaml"
        cfg.write_text(yaml.safe_dump(overlay))
        cmd += ["--configfile", str(cfg)]
    return subprocess.run(cmd + list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def job_counts(stdout: str) -> dict[str, int]:
    """Jobs per rule from the ``Job stats:`` table of a Snakemake run or dry run (the ``total`` row left out)."""
    if "Job stats:" not in stdout and "Nothing to be done" in stdout:
        return {}
    table = stdout.split("Job stats:", 1)[1].split("\ntotal", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


# ---------------------------------------------------------------------------------------------------------
# Two pytest-xdist workers (`make test`: ``-n 2 --dist loadgroup``): the modules of ASIDE run on one worker, every
# other module on the other. ASIDE holds the CPU-chain modules (the session's ``cpu_chain`` is built once, on that
# worker), two more verl modules, some light ones and the modules whose time is mostly waiting (a live Slurm's
# status polling, service time-outs, killed servers), about half of the suite's time, and runs them in this order:
# the training first, while the other worker runs its lighter modules, the waiting last, beside the other worker's
# learning checks. None of them starts a sandbox job (their runs, scanned for processes of the sandbox's uid range:
# none), so the tests that scan the host for the sandbox's processes never see another worker's; every module that
# runs sandbox jobs stays on the other worker. (xdist's own loadgroup marks a test by renaming its node id, which
# pytest 9.2 ignores: the grouping is done by the scheduler below instead; tests/test_suite_workers.py checks it.)
ASIDE = (
    "tests/verl/test_cpu.py",
    "tests/workflow/test_training_workflow.py",
    "tests/rewards/test_reward_model.py",
    "tests/test_smoke_checks.py",
    "tests/hostile/test_config_bad.py",
    "tests/workflow/test_eval_seeds_plan.py",
    "tests/workflow/test_generate_workflow.py",
    "tests/verl/test_launch.py",
    "tests/test_preflight.py",
    "tests/verl/test_dhrcl.py",
    "tests/test_smoke.py",
    "tests/hub/test_fetch.py",
    "tests/hostile/test_compile_hostile.py",
    "tests/rewards/test_embedding.py",
    "tests/test_services.py",
    "tests/hostile/test_faults.py",
    "tests/slurm/test_ray_slurm.py",
    "tests/slurm/test_profile_slurm.py",
)


def suite_group(nodeid: str) -> str:
    """The worker group of a test: ``aside`` for the modules of :data:`ASIDE`, ``main`` for the rest."""
    return "aside" if nodeid.split("::", 1)[0] in ASIDE else "main"


def pytest_collection_modifyitems(config, items):
    """The modules of :data:`ASIDE` last, in its order (the others, and the tests inside a module, keep theirs)."""
    position = {rel: i for i, rel in enumerate(ASIDE)}
    items.sort(key=lambda item: position.get(item.nodeid.split("::", 1)[0], -1))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadgroup``: xdist's scope scheduler with the two groups of :func:`suite_group` as its
    scopes (each goes whole to one worker)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    missing = [rel for rel in ASIDE if not (REPO_ROOT / rel).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py: ASIDE names modules that do not exist: {missing}")
    from xdist.scheduler import LoadScopeScheduling

    class TwoGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return suite_group(nodeid)

    return TwoGroups(config, log)


# The two shipped configurations, validated (defaults filled in); one copy per test module, which may change it.
@pytest.fixture(scope="module")
def paper() -> dict:
    from codegrpo.config import load_config

    return load_config(REPO_ROOT / "config" / "paper.yaml", check_files=False)


@pytest.fixture(scope="module")
def local() -> dict:
    from codegrpo.config import load_config

    return load_config(REPO_ROOT / "config.yaml", check_files=False)


# ---------------------------------------------------------------------------------------------------------
# One local Ray per test module for its verl CPU runs (codegrpo.verl.cpu.local_ray): each run joins it through
# RAY_ADDRESS instead of starting and stopping its own (about 10 s and 8 s of CPU per run on 2 cores). Only the
# runs inside ``shared_ray.joined()`` see it; other tests keep starting their own Ray. Module scope: an idle Ray
# still costs about 6 % of a core, so it lives only while the module that trains runs.


class SharedRay:
    #: training runs that can use the Ray at the same time (one fake GPU each; each run asks for one)
    slots = 2

    def __init__(self, env: dict[str, str]):
        self.env = env

    @contextlib.contextmanager
    def joined(self):
        """``os.environ`` carries the cluster's address and token while the block runs."""
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            yield self.env
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def run_dhrcl(self, run_cfg: dict, variant: str, data: dict, init_model, run_dir: Path) -> dict:
        """``run_dhrcl`` of ``variant`` with seed 0 on a curriculum dataset (``data``: the paths
        write_curriculum_dataset returns) from ``init_model`` into ``run_dir``, joined to this Ray."""
        from codegrpo.verl.dhrcl import run_dhrcl

        files = {"train_files": data["rl_train"], "val_files": data["rl_val"]}
        with self.joined():
            return run_dhrcl(run_cfg, variant, **files, init_model=str(init_model), run_dir=run_dir, seed=0)


@pytest.fixture(scope="module")
def shared_ray():
    from codegrpo.verl import cpu

    with cpu.local_ray(SharedRay.slots, export=False) as env:
        yield SharedRay(env)


# ---------------------------------------------------------------------------------------------------------
# The CPU training chain, trained once per session and read by every test that checks a trained stage
# (tests/workflow/test_training_workflow.py, tests/verl/test_cpu.py): never train twice to check two things.


@dataclass
class CpuChain:
    """``snakemake -c2 skin_rl`` with config.yaml (data -> tiny model -> sft_skeleton -> skeleton_rl -> sft_skin
    -> skin_rl, 2 steps each) in a private results folder; skin_rl's identifier reward goes through the embedding
    server (``embedding.serve: true``) while the caller's environment names a dead endpoint, which the run must
    ignore. Tests that change a run copy its folder first."""

    proc: subprocess.CompletedProcess
    results: Path
    config: dict
    stale_api_base: str

    @property
    def runs(self) -> Path:
        return self.results / "runs"

    def check(self) -> None:
        assert self.proc.returncode == 0, self.proc.stdout[-3000:] + self.proc.stderr[-5000:]


CHAIN_OVERLAY = {"embedding": {"serve": True}}


@pytest.fixture(scope="session")
def cpu_chain(tmp_path_factory, snakemake_bin) -> CpuChain:
    """The chain's GRPO jobs join the run's pipeline Ray (``pipeline_ray``: started in Snakemake's ``onstart``,
    stopped at the end), the default pipeline's own path."""
    import yaml

    from codegrpo.config import load_config
    from codegrpo.services import free_port

    tmp = tmp_path_factory.mktemp("cpu_chain")
    overlay = {"results_dir": str(tmp / "results"), "logs_dir": str(tmp / "logs"), **CHAIN_OVERLAY}
    (tmp / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    stale = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    proc = subprocess.run(
        [snakemake_bin, "--nolock", "--configfile", str(tmp / "overlay.yaml"), "-c2", "skin_rl"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
        env={**env, "CODEGRPO_EMBEDDING_API_BASE": stale},
    )
    cfg = load_config(REPO_ROOT / "config.yaml", check_files=False)
    for key, value in overlay.items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) else value
    return CpuChain(proc, tmp / "results", cfg, stale)

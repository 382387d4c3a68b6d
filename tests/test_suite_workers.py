"""The suite's two pytest-xdist workers (`make test`: ``-n 2 --dist loadgroup``, tests/conftest.py): the modules
of ``ASIDE`` run whole on one worker, every other module on the other."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ASIDE, REPO_ROOT, suite_group

MAIN_MODULES = ("tests/test_runlock.py", "tests/test_procgroup.py")
ASIDE_FAST = "tests/test_services.py"  # its fast tests only (-k below)


def test_aside_modules_exist_and_are_grouped():
    assert ASIDE_FAST in ASIDE
    for rel in ASIDE:
        assert (REPO_ROOT / rel).is_file(), rel
        assert suite_group(f"{rel}::test_x") == "aside"
    assert suite_group("tests/sandbox/test_client.py::test_x") == "main"
    assert suite_group("tests/slurm/test_profile_slurm.py::test_cancelled_job_is_retried_and_resumes") == "aside"


def test_make_test_runs_each_group_on_one_worker(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-p",
            "no:cacheprovider",
            "-v",
            "--basetemp",
            str(tmp_path / "bt"),
            *MAIN_MODULES,
            ASIDE_FAST,
            "-k",
            "not (services and (lifecycle or not_ready or process_group))",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = re.findall(r"^\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+?)::", proc.stdout, re.M)
    workers: dict[str, set[str]] = {}
    for worker, module in ran:
        workers.setdefault(suite_group(module), set()).add(worker)
    assert {module for _, module in ran} == {*MAIN_MODULES, ASIDE_FAST}, proc.stdout[-3000:]
    # each group on exactly one worker, the two groups on different workers
    assert len(workers["main"]) == len(workers["aside"]) == 1, workers
    assert workers["main"] != workers["aside"], workers

"""A job's processes inside the sandbox (codegrpo/sandbox/processes.py): what can be checked without forking a
job under a private uid (the sandbox tests and tests/hostile/test_sandbox_hostile.py run whole jobs)."""

from __future__ import annotations

import os
import subprocess
import sys

from codegrpo.sandbox import processes


def test_proc_scan_finds_live_processes_by_uid():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        mine = processes.proc_uid_pids(os.getuid())
        assert os.getpid() in mine and child.pid in mine
        by_uid = processes.proc_uids_pids(None)
        assert child.pid in by_uid[os.getuid()]
    finally:
        child.kill()
        child.wait()
    assert child.pid not in processes.proc_uid_pids(os.getuid())


def test_new_uids_are_distinct_unused_and_in_range():
    used = set(processes.proc_uids_pids(None))
    uids = processes.new_uids(5)
    assert len(set(uids)) == 5
    assert all(processes.UID_RANGE[0] <= u < processes.UID_RANGE[1] and u not in used for u in uids)


def test_outcome_of_wait_statuses():
    lim = {"cpu_s": 1000}
    pid = os.fork()
    if pid == 0:
        os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert processes.outcome(status, lim, 0.1) == (3, None, False)
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), 9)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert processes.outcome(status, lim, 0.1) == (None, 9, False)  # killed, its CPU budget not spent


def test_job_env_is_fixed_and_minimal(tmp_path):
    env = processes.job_env(str(tmp_path))
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)
    assert env["PATH"].startswith(os.path.dirname(sys.executable) + ":")
    assert set(env) == {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "PYTHONNOUSERSITE",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
        "OMP_NUM_THREADS",
        "MPLBACKEND",
    }

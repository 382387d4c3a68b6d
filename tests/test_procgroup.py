"""codegrpo.procgroup: one helper for "new session, kill the group on timeout, collect output"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from codegrpo.procgroup import become_group_leader, kill_group, popen_group, run_group, stop_group

# A shell that starts a grandchild (a separate sleep process), reports its pid, then waits forever.
GRANDCHILD = "sleep 1000 & echo $! ; wait"


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie waiting for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int) -> bool:
    """Poll until ``pid`` is gone; the kill was SIGKILL, so this ends as soon as the kernel has acted."""
    for _ in range(100_000):
        if _gone(pid):
            return True
        os.sched_yield()
    return _gone(pid)


def test_output_and_exit_code():
    res = run_group(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=60)
    assert (res.returncode, res.stdout, res.stderr, res.timed_out) == (3, b"out\n", b"err\n", False)
    cp = res.completed()
    assert isinstance(cp, subprocess.CompletedProcess) and cp.returncode == 3 and cp.stdout == b"out\n"


def test_input_and_cwd_and_env(tmp_path):
    res = run_group(
        ["sh", "-c", 'cat; pwd; echo "$X"'],
        timeout=60,
        cwd=tmp_path,
        env={"X": "42", "PATH": os.environ["PATH"]},
        input=b"hello\n",
    )
    assert res.stdout.decode().splitlines() == ["hello", str(tmp_path), "42"]


def test_uncaptured_output_is_empty():
    res = run_group(["sh", "-c", "echo out; exit 0"], timeout=60, capture=False)
    assert (res.returncode, res.stdout, res.stderr) == (0, b"", b"")


def test_missing_program_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        run_group([str(tmp_path / "no-such-program")], timeout=5)


def test_child_runs_in_a_new_session():
    res = run_group([sys.executable, "-c", "import os; print(os.getsid(0), os.getpid())"], timeout=60)
    sid, pid = map(int, res.stdout.split())
    assert sid == pid != os.getsid(0)


def test_timeout_kills_grandchildren():
    # The grandchild inherits stdout: if it survived, communicate() would never see EOF and the call would hang.
    res = run_group(["sh", "-c", "echo $$; " + GRANDCHILD], timeout=1.0)
    assert res.timed_out
    assert res.returncode == -signal.SIGKILL
    shell_pid, sleep_pid = map(int, res.stdout.split())
    assert _wait_gone(sleep_pid), "grandchild survived the timeout"
    assert _gone(shell_pid)


def test_stop_group_kills_children_that_outlive_the_leader():
    # The leader ignores nothing but exits on SIGTERM at once; its grandchild ignores SIGTERM. The grandchild
    # prints its own pid once SIGTERM is ignored (a shell started with TERM ignored keeps it so, and so does the
    # sleep it execs), so the signal cannot reach it before it is the process under test.
    proc = popen_group(
        ["sh", "-c", "(trap '' TERM; exec sh -c 'echo $$; exec sleep 1000') & wait"], stdout=subprocess.PIPE
    )
    child = int(proc.stdout.readline())
    forced = stop_group(proc, grace_s=30)
    proc.stdout.close()
    assert forced is False  # the leader obeyed SIGTERM
    assert proc.returncode is not None
    assert _wait_gone(child)


def test_stop_group_reports_a_leader_that_ignores_term():
    proc = popen_group(
        [
            sys.executable,
            "-c",
            "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); signal.pause()",
        ],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout.readline() == b"ready\n"
    assert stop_group(proc, grace_s=0.5) is True
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL


def test_stop_group_without_signal_waits_for_a_clean_exit():
    proc = popen_group(["sh", "-c", "read x; exit 7"], stdin=subprocess.PIPE)
    proc.stdin.close()  # EOF asks it to finish
    assert stop_group(proc, grace_s=60, term=None) is False
    assert proc.returncode == 7


def test_kill_group_of_a_finished_group_is_false():
    proc = popen_group(["true"])
    proc.wait()
    assert kill_group(proc) is False


def test_popen_group_refuses_its_own_session_arguments():
    with pytest.raises(TypeError):
        popen_group(["true"], start_new_session=False)


def test_forked_child_leads_its_group_and_kill_group_takes_its_pid():
    """A child made by os.fork() (as the sandbox's jobs are) calls become_group_leader; kill_group(pid) then
    ends it and everything it started."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: new session, then a shell that starts a grandchild and reports its pid
        try:
            os.close(r)
            become_group_leader()
            os.dup2(w, 1)
            os.execvp("sh", ["sh", "-c", "sleep 1000 & echo $! ; wait"])
        finally:
            os._exit(127)
    os.close(w)
    with os.fdopen(r) as fh:
        grandchild = int(fh.readline())
        assert os.getsid(pid) == pid and os.getpgid(grandchild) == pid
        assert kill_group(pid) is True
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert _wait_gone(grandchild)

"""Child processes in their own process group: start, run with a time limit, stop.

Every external program the pipeline starts (gcc and its ``cc1``/``as``, Psyche-C wrappers, the sandbox's
``bwrap``, vLLM / embedding servers, Ray nodes) may start children of its own. Killing only the direct child
leaves those grandchildren running and holding the output pipes open, so a timeout would not end the wait.
Each such program is therefore started as the leader of a new session (``start_new_session=True``), and on a
timeout or stop the whole group is killed.

- :func:`popen_group` starts one (a :class:`subprocess.Popen` that leads its own group);
- :func:`run_group` runs one to completion with a time limit and collects its output;
- :func:`kill_group` / :func:`stop_group` end one (SIGKILL, or SIGTERM, a grace period, then SIGKILL);
- :func:`become_group_leader` is the same "new session" for a child forked by hand (``os.fork``) that must
  set limits or drop privileges before it runs the program, as the sandbox supervisor's jobs do; such a
  group is ended with ``kill_group(pid)``.

Standard library only: the sandbox supervisor loads this file by path inside the sandbox.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = ["GroupResult", "popen_group", "run_group", "kill_group", "stop_group", "become_group_leader"]


@dataclass(frozen=True)
class GroupResult:
    """Outcome of :func:`run_group`.

    ``returncode`` is the leader's exit status (negative: killed by that signal; None only when it timed out and
    could not be collected). ``stdout`` / ``stderr`` are bytes (``b""`` when not captured). ``timed_out``: the
    time limit was reached and the group was killed.
    """

    argv: tuple[str, ...]
    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool

    def completed(self) -> subprocess.CompletedProcess:
        """The same result as a :class:`subprocess.CompletedProcess` (for callers that expect one)."""
        return subprocess.CompletedProcess(list(self.argv), self.returncode, self.stdout, self.stderr)


def popen_group(argv: Sequence[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(argv, start_new_session=True, **kwargs)``: the child leads a new process group.

    ``stdin`` defaults to ``/dev/null`` so a child never reads the caller's terminal.
    """
    if "start_new_session" in kwargs or "preexec_fn" in kwargs or "process_group" in kwargs:
        raise TypeError("popen_group sets the session itself; do not pass start_new_session/preexec_fn/process_group")
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.Popen([str(a) for a in argv], start_new_session=True, **kwargs)


def become_group_leader() -> None:
    """In a child made by ``os.fork()``: start a new session, so that :func:`kill_group` on its pid reaches
    everything it starts (what ``popen_group`` does for a :class:`subprocess.Popen`)."""
    os.setsid()


def kill_group(proc: subprocess.Popen | int, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to the whole process group led by ``proc`` (a Popen or a pid); False when it no longer exists
    (or, after a privilege drop, may not be signalled)."""
    pgid = proc if isinstance(proc, int) else proc.pid
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_group(proc: subprocess.Popen, *, grace_s: float = 10.0, term: int | None = signal.SIGTERM) -> bool:
    """Stop a group started by :func:`popen_group`; return True when its leader had to be killed.

    Sends ``term`` to the group (None: send nothing, e.g. when closing the child's stdin already asked it to
    finish), waits up to ``grace_s`` for the leader, then SIGKILLs the group in any case (children may outlive
    their leader) and collects the leader.
    """
    forced = False
    if proc.poll() is None:
        if term is not None:
            kill_group(proc, term)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            forced = True
    kill_group(proc, signal.SIGKILL)
    try:
        proc.wait(timeout=max(grace_s, 5.0))
    except subprocess.TimeoutExpired:  # a leader in uninterruptible sleep: leave it to init
        pass
    return forced


def run_group(
    argv: Sequence[str],
    *,
    timeout: float | None,
    cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    capture: bool = True,
) -> GroupResult:
    """Run ``argv`` as a new process group, wait up to ``timeout`` seconds, kill the whole group past it.

    ``capture``: collect stdout/stderr (else both go to ``/dev/null``). ``input``: bytes written to stdin (else
    stdin is ``/dev/null``). Raises :class:`OSError` when the program cannot be started.
    """
    pipe = subprocess.PIPE if capture else subprocess.DEVNULL
    proc = popen_group(
        argv,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=pipe,
        stderr=pipe,
    )
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc, signal.SIGKILL)
        # The whole group is gone, so the pipes reach EOF and the leader can be collected.
        out, err = proc.communicate()
        return GroupResult(tuple(proc.args), proc.returncode, out or b"", err or b"", True)
    return GroupResult(tuple(proc.args), proc.returncode, out or b"", err or b"", False)

"""A job's processes inside the sandbox: environment, limits, private uids, fork, wait, kill and reap.

Used by the supervisor (:mod:`codegrpo.sandbox.supervisor`, whose docstring describes a job's life): a job's child
starts a new session, gets the resource limits (:func:`set_limits`) and its private uid (:func:`new_uids`: uids no
live process uses), and at the end every process of the job is killed (:func:`kill_job`: ``kill(-1)`` issued as the
job's uid until a ``/proc`` scan finds none, else by process group and PID namespace); the supervisor is a
subreaper, so :func:`reap` collects orphans (their statuses in :data:`REAPED`).

Standard library only. Inside the sandbox it is loaded by file path (the supervisor runs as a script), after
``codegrpo/procgroup.py``, which the supervisor loads first as ``_codegrpo_procgroup``.
"""

from __future__ import annotations

import os
import random
import select
import signal
import sys
import time

if __package__:  # imported as codegrpo.sandbox.processes (host side, tests)
    from codegrpo import procgroup
else:  # loaded by file path by the supervisor inside the sandbox, after procgroup.py
    procgroup = sys.modules["_codegrpo_procgroup"]

UID_RANGE = (200_000, 1_200_000)  # private job uids are drawn from here
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def job_env(job_dir: str) -> dict[str, str]:
    return {
        "PATH": f"{os.path.dirname(sys.executable)}:{_SAFE_PATH}",
        "HOME": job_dir,
        "TMPDIR": job_dir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONNOUSERSITE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


def proc_uid_pids(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid`` (a /proc scan)."""
    return proc_uids_pids({uid}).get(uid, [])


def proc_uids_pids(uids: set[int] | None) -> dict[int, list[int]]:
    """Live (non-zombie) processes by real uid, for ``uids`` (all uids when None): one /proc scan."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                st = fh.read()
        except OSError:
            continue
        state = uid_line = None
        for line in st.splitlines():
            if line.startswith("State:"):
                state = line.split()[1]
            elif line.startswith("Uid:"):
                uid_line = line.split()
        if uid_line and state != "Z":
            u = int(uid_line[1])
            if uids is None or u in uids:
                out.setdefault(u, []).append(int(name))
    return out


REAPED: dict[int, int] = {}


def reap() -> None:
    """Collect exited children (the supervisor is a subreaper); statuses are kept for the job's own pid."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def setup_failed(exc: BaseException) -> None:
    """In a job's child before exec / its body: say on its stderr why the setup failed (best effort)."""
    try:
        os.write(2, f"sandbox job setup failed: {exc!r}\n".encode())
    except OSError:
        pass


def collect(pid: int, status: int | None, default: int | None) -> int | None:
    """``status`` when already known, else the child's wait status (one reaped earlier: ``REAPED``, or
    ``default``)."""
    if status is not None:
        return status
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return REAPED.pop(pid, default)


def outcome(status: int, lim: dict, dt: float) -> tuple[int | None, int | None, bool]:
    """(exit code, signal, out of CPU) of a job's wait status: SIGXCPU, or SIGKILL once its CPU limit is spent."""
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None, False
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return None, sig, sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_exhausted(lim, dt))
    return None, None, False


def kill_uid(uid: int, pids) -> None:
    """SIGKILL every process of ``uid``: ``kill(-1)`` from a child that became that uid (it reaches exactly that
    uid's processes), then each of ``pids`` directly."""
    killer = os.fork()
    if killer == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(killer, 0)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_job(uid: int | None, pgid: int) -> None:
    """Kill every process of the job: by private uid when there is one, else its process group / PID ns."""
    for _ in range(200):
        procgroup.kill_group(pgid, signal.SIGKILL)
        if uid is not None:
            pids = proc_uid_pids(uid)
            if not pids:
                reap()
                return
            kill_uid(uid, pids)
        elif os.environ.get("CODEGRPO_SANDBOX_PIDNS") == "1" and os.getppid() == 1 and os.getpid() < 16:
            # Alone in a private PID namespace (under bwrap's init): everything else there is the job's.
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            reap()
            others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
            if not [p for p in others if proc_state(p) not in ("Z", None)]:
                return
        else:
            reap()
            return
        reap()
        time.sleep(0.005)


def kill_jobs(parts: list[tuple[int | None, int]]) -> None:
    """:func:`kill_job` for several parts of one job (private uids: one /proc scan per round for all)."""
    if any(uid is None for uid, _ in parts):
        for uid, pgid in parts:
            kill_job(uid, pgid)
        return
    for _ in range(200):
        for _, pgid in parts:
            procgroup.kill_group(pgid, signal.SIGKILL)
        live = proc_uids_pids({uid for uid, _ in parts})
        if not live:
            reap()
            return
        for uid, pids in live.items():
            kill_uid(uid, pids)
        reap()
        time.sleep(0.005)


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def set_limits(lim: dict, uid_switch: bool) -> None:
    import resource

    def setl(which, soft, hard=None):
        hard = soft if hard is None else hard
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            cur_soft, cur_hard = resource.getrlimit(which)
            resource.setrlimit(which, (min(soft, cur_hard) if cur_hard != resource.RLIM_INFINITY else soft, cur_hard))

    cpu = int(lim["cpu_s"])
    setl(resource.RLIMIT_CPU, cpu, cpu + 1)
    mem = int(lim["memory_mb"]) * 1024 * 1024
    setl(resource.RLIMIT_AS, mem)
    setl(resource.RLIMIT_DATA, mem)
    fsize = int(lim["fsize_mb"]) * 1024 * 1024
    setl(resource.RLIMIT_FSIZE, fsize)
    setl(resource.RLIMIT_CORE, 0)
    setl(resource.RLIMIT_NOFILE, int(lim["nofile"]))
    setl(resource.RLIMIT_MEMLOCK, 0)
    if uid_switch:
        setl(resource.RLIMIT_NPROC, int(lim["nproc"]))
    else:  # shared uid: allow the processes it already has plus the job's budget
        mine = len(proc_uid_pids(os.getuid()))
        setl(resource.RLIMIT_NPROC, mine + int(lim["nproc"]))


_LIBC = None


def set_dumpable(flag: int) -> None:
    """prctl(PR_SET_DUMPABLE): a non-dumpable process's /proc files (fd, mem, environ) are closed to its own uid,
    and it cannot be ptraced by it, so a job sharing the uid cannot reach the runner's or supervisor's pipes."""
    global _LIBC
    try:
        if _LIBC is None:  # loaded once in the supervisor; forked jobs inherit it
            import ctypes

            _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.prctl(4, flag, 0, 0, 0)
    except Exception:  # noqa: BLE001
        pass


def fork_part(uid: int | None, lim: dict, cwd: str, fds: dict[int, int], env: dict, body) -> int:
    """Fork one process of a pytest job: new session, limits, its uid, ``fds`` (target -> source) as its only
    descriptors, the job's environment; it runs ``body()`` and exits with its status."""
    pid = os.fork()
    if pid:
        return pid
    code = 127
    try:
        procgroup.become_group_leader()
        set_limits(lim, uid is not None)
        set_dumpable(0)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.umask(0o022)
        os.chdir(cwd)
        # move the sources out of the way of the targets first, then place them
        high = {t: os.dup(src) for t, src in fds.items()}
        for t, src in high.items():
            os.dup2(src, t)
        os.closerange(max(fds) + 1, 65536)
        os.environ.clear()
        os.environ.update(env)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        code = body()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException as exc:  # noqa: BLE001
        setup_failed(exc)
    os._exit(code)


def wait_for(pid: int, deadline: float) -> tuple[bool, int | None]:
    """Wait for ``pid`` until ``deadline`` (monotonic); (timed out, wait status or None)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            got, st = os.waitpid(pid, os.WNOHANG)
            if got:
                return False, st
            left = deadline - time.monotonic()
            if left <= 0:
                return True, None
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(left, 0.002))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def cpu_exhausted(lim: dict, dt: float) -> bool:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime >= float(lim["cpu_s"]) and dt >= float(lim["cpu_s"]) * 0.5


def new_uid() -> int:
    return new_uids(1)[0]


def new_uids(n: int) -> list[int]:
    """``n`` distinct uids from UID_RANGE that no live process uses (one /proc scan)."""
    used = set(proc_uids_pids(None))
    out: list[int] = []
    for _ in range(100 * n):
        uid = random.SystemRandom().randrange(*UID_RANGE)
        if uid not in used and uid not in out:
            out.append(uid)
            if len(out) == n:
                return out
    raise RuntimeError("no free uid for a sandbox job")

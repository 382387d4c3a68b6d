"""The sandbox supervisor: runs inside the sandbox and runs the jobs, one at a time.

Started by the host (:mod:`codegrpo.sandbox.client`) as a script, ``python -I supervisor.py --serve|--oneshot
WORKSPACE``, under ``bwrap`` (:mod:`codegrpo.sandbox.bwrap`). It reads one JSON request per line on stdin and
answers one JSON line on stdout. For each job it creates ``WORKSPACE/job``, writes the job's files, and for
each step forks a child that

* starts a new session (:func:`codegrpo.procgroup.become_group_leader`),
* sets the resource limits (``setrlimit``: CPU seconds, address space, processes, file size, open files, no
  core dumps),
* drops to a private uid/gid that no other process uses (when the supervisor is root): the job directory
  (mode 0700, owned by it; its parent root-owned 0711) is the only place that uid may write, and
  ``RLIMIT_NPROC`` then bounds exactly the job's processes,
* points stdin/stdout/stderr at files bounded by ``RLIMIT_FSIZE``, closes every other descriptor (the
  protocol pipes included) and gets a fixed minimal environment,
* then ``exec``s the program (C, the compiler) or runs pytest in process
  (:mod:`codegrpo.sandbox.pytest_driver`).

The supervisor enforces the wall-clock limit (``pidfd`` + ``select``). At the end every process of the job is
killed: by private uid (``kill(-1)`` issued as that uid, repeated until a ``/proc`` scan finds none, which also
catches daemonised children that left the process group), else by process group and PID namespace. The
supervisor is a subreaper, so orphans are collected here.

In ``--serve`` mode (the fork server) it imports pytest and prepares its session once, then freezes the heap
for the garbage collector (``gc.freeze``): a job costs a ``fork``. ``--oneshot`` answers one request and exits.

Standard library only. Run as a script it has no package on its path (``-I``), so it loads its two helpers,
``pytest_driver.py`` and ``../procgroup.py`` (standard library at top level), by file path.
"""

from __future__ import annotations

import base64
import json
import os
import random
import select
import shutil
import signal
import sys
import time
from typing import Any

UID_RANGE = (200_000, 1_200_000)  # private job uids are drawn from here
TRUNC_MARK = "\n[... output truncated ...]\n"
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def _load_by_path(name: str, path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


if __package__:  # imported as codegrpo.sandbox.supervisor (host side, tests)
    from codegrpo import procgroup
    from codegrpo.sandbox import pytest_driver
else:  # run as a script inside the sandbox
    _HERE = os.path.dirname(os.path.abspath(__file__))
    procgroup = _load_by_path("_codegrpo_procgroup", os.path.join(os.path.dirname(_HERE), "procgroup.py"))
    pytest_driver = _load_by_path("_codegrpo_pytest_driver", os.path.join(_HERE, "pytest_driver.py"))


def _job_env(job_dir: str) -> dict[str, str]:
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


def _read_text(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return ""
    text = data[:limit].decode("utf-8", "replace")
    return text + TRUNC_MARK if len(data) > limit else text


def _proc_uid_pids(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid`` (a /proc scan)."""
    return _proc_uids_pids({uid}).get(uid, [])


def _proc_uids_pids(uids: set[int] | None) -> dict[int, list[int]]:
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


_REAPED: dict[int, int] = {}


def _reap() -> None:
    """Collect exited children (the supervisor is a subreaper); statuses are kept for the job's own pid."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _REAPED[pid] = status


def _setup_failed(exc: BaseException) -> None:
    """In a job's child before exec / its body: say on its stderr why the setup failed (best effort)."""
    try:
        os.write(2, f"sandbox job setup failed: {exc!r}\n".encode())
    except OSError:
        pass


def _collect(pid: int, status: int | None, default: int | None) -> int | None:
    """``status`` when already known, else the child's wait status (one reaped earlier: ``_REAPED``, or
    ``default``)."""
    if status is not None:
        return status
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return _REAPED.pop(pid, default)


def _outcome(status: int, lim: dict, dt: float) -> tuple[int | None, int | None, bool]:
    """(exit code, signal, out of CPU) of a job's wait status: SIGXCPU, or SIGKILL once its CPU limit is spent."""
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None, False
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return None, sig, sig == signal.SIGXCPU or (sig == signal.SIGKILL and _cpu_exhausted(lim, dt))
    return None, None, False


def _kill_uid(uid: int, pids) -> None:
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


def _kill_job(uid: int | None, pgid: int) -> None:
    """Kill every process of the job: by private uid when there is one, else its process group / PID ns."""
    for _ in range(200):
        procgroup.kill_group(pgid, signal.SIGKILL)
        if uid is not None:
            pids = _proc_uid_pids(uid)
            if not pids:
                _reap()
                return
            _kill_uid(uid, pids)
        elif os.environ.get("CODEGRPO_SANDBOX_PIDNS") == "1" and os.getppid() == 1 and os.getpid() < 16:
            # Alone in a private PID namespace (under bwrap's init): everything else there is the job's.
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _reap()
            others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
            if not [p for p in others if _proc_state(p) not in ("Z", None)]:
                return
        else:
            _reap()
            return
        _reap()
        time.sleep(0.005)


def _kill_jobs(parts: list[tuple[int | None, int]]) -> None:
    """:func:`_kill_job` for several parts of one job (private uids: one /proc scan per round for all)."""
    if any(uid is None for uid, _ in parts):
        for uid, pgid in parts:
            _kill_job(uid, pgid)
        return
    for _ in range(200):
        for _, pgid in parts:
            procgroup.kill_group(pgid, signal.SIGKILL)
        live = _proc_uids_pids({uid for uid, _ in parts})
        if not live:
            _reap()
            return
        for uid, pids in live.items():
            _kill_uid(uid, pids)
        _reap()
        time.sleep(0.005)


def _proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _set_limits(lim: dict, uid_switch: bool) -> None:
    import resource

    def setl(which, soft, hard=None):
        hard = soft if hard is None else hard
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            cur_soft, cur_hard = resource.getrlimit(which)
            resource.setrlimit(which, (min(soft, cur_hard) if cur_hard != resource.RLIM_INFINITY else soft,
                                       cur_hard))

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
        mine = len(_proc_uid_pids(os.getuid()))
        setl(resource.RLIMIT_NPROC, mine + int(lim["nproc"]))


def _run_step(job_dir: str, uid: int | None, step: dict, preloaded: bool) -> dict:
    lim = step["limits"]
    out_path, err_path = os.path.join(job_dir, ".stdout"), os.path.join(job_dir, ".stderr")
    in_path = os.path.join(job_dir, ".stdin")
    for p in (out_path, err_path):
        with open(p, "wb"):
            pass
        if uid is not None:
            os.chown(p, uid, uid)
    if step.get("stdin"):
        with open(in_path, "wb") as fh:
            fh.write(base64.b64decode(step["stdin"]))
    env = _job_env(job_dir)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # ---- the job ----
        code = 127
        try:
            procgroup.become_group_leader()
            _set_limits(lim, uid is not None)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            os.chdir(job_dir)
            fin = os.open(in_path if step.get("stdin") else os.devnull, os.O_RDONLY)
            fout = os.open(out_path, os.O_WRONLY | os.O_TRUNC)
            ferr = os.open(err_path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(fin, 0)
            os.dup2(fout, 1)
            os.dup2(ferr, 2)
            os.closerange(3, 65536)  # the supervisor's protocol pipes must not reach the job
            os.environ.clear()
            os.environ.update(env)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            if step["kind"] == "exec":
                # Python ignores SIGXFSZ (and SIGPIPE, reset above); ignored signals survive exec, so restore
                # the defaults a C program expects: exceeding the file-size limit then ends it by SIGXFSZ.
                signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                argv = step["argv"]
                exe = argv[0] if "/" in argv[0] else (shutil.which(argv[0], path=env["PATH"]) or argv[0])
                os.execve(exe, argv, env)
            else:
                raise ValueError(f"unknown step kind {step['kind']!r}")
        except BaseException as exc:  # noqa: BLE001
            _setup_failed(exc)
        os._exit(code)
    # ---- supervisor: wait with a wall-clock limit ----
    timed_out = False
    status = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    deadline = t0 + float(lim["wall_s"])
    while True:
        got, st = os.waitpid(pid, os.WNOHANG)
        if got:
            status = st
            break
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if pidfd is not None:
            select.select([pidfd], [], [], left)
        else:
            time.sleep(min(left, 0.002))
    if pidfd is not None:
        os.close(pidfd)
    _kill_job(uid, pid)
    status = _collect(pid, status, signal.SIGKILL)
    _REAPED.clear()
    dt = time.monotonic() - t0
    rc, sig, out_of_cpu = _outcome(status, lim, dt)
    timed_out = timed_out or out_of_cpu
    out_limit = int(lim["output_bytes"])
    res = {"returncode": rc, "signal": sig, "timed_out": timed_out, "duration_s": dt,
           "stdout": _read_text(out_path, out_limit), "stderr": _read_text(err_path, out_limit)}
    return res


_LIBC = None


def _set_dumpable(flag: int) -> None:
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


def _fork_part(uid: int | None, lim: dict, cwd: str, fds: dict[int, int], env: dict, body) -> int:
    """Fork one process of a pytest job: new session, limits, its uid, ``fds`` (target -> source) as its only
    descriptors, the job's environment; it runs ``body()`` and exits with its status."""
    pid = os.fork()
    if pid:
        return pid
    code = 127
    try:
        procgroup.become_group_leader()
        _set_limits(lim, uid is not None)
        _set_dumpable(0)
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
        _setup_failed(exc)
    os._exit(code)


def _run_pytest_step(job_dir: str, uids: tuple[int | None, int | None], step: dict, files: dict) -> dict:
    """A pytest job in two processes: the candidate (``solution.py``, uid ``uids[0]``) and the trusted runner
    (the test file, uid ``uids[1]``), joined by a socket; only the runner holds the report descriptor.

    A ``suite`` step (the evaluation suites, :mod:`codegrpo.eval.suite_driver`) has the same two processes; its
    runner runs the driver's checks (``step["driver"]``, mode ``step["mode"]``) instead of pytest."""
    import socket as _socket

    lim = step["limits"]
    uid_c, uid_t = uids
    tests_dir, cand_dir, work_dir = (os.path.join(job_dir, n) for n in ("tests", "cand", "work"))
    os.mkdir(tests_dir, 0o700)
    os.mkdir(cand_dir, 0o700)
    os.mkdir(work_dir)
    os.chmod(work_dir, 0o1777)  # the shared working directory (files the tests hand to the solution)
    if step["kind"] == "pytest":
        placed = [(tests_dir, "test_solution.py", files.get("test_solution.py", "")),
                  (cand_dir, "solution.py", files.get("solution.py", ""))]
    else:  # "suite": ``tests/NAME`` for the runner's directory, ``cand/NAME`` for the solution's
        placed = []
        for key, b64 in files.items():
            side, _, name = key.partition("/")
            if side not in ("tests", "cand") or not name or "/" in name or name.startswith("."):
                raise ValueError(f"bad file name {key!r}")
            placed.append((tests_dir if side == "tests" else cand_dir, name, b64))
    for d, name, b64 in placed:
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(base64.b64decode(b64))
        os.chmod(os.path.join(d, name), 0o400)
    pytest_driver.write_ini(tests_dir)
    outs = {}
    for d, uid in ((tests_dir, uid_t), (cand_dir, uid_c)):
        for n in (".stdout", ".stderr"):
            with open(os.path.join(d, n), "wb"):
                pass
            outs[(d, n)] = os.path.join(d, n)
        if uid is not None:
            for e in [d] + [os.path.join(d, n) for n in os.listdir(d)]:
                os.chown(e, uid, uid)
    rep_path = os.path.join(job_dir, ".report")
    rep_fd = os.open(rep_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(rep_path)  # reachable only through the runner's descriptor
    if uid_t is not None:
        os.fchown(rep_fd, uid_t, uid_t)
    s_cand, s_run = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    env = _job_env(work_dir)
    null = os.open(os.devnull, os.O_RDONLY)
    t0 = time.monotonic()
    pids = []
    try:
        cfd = [os.open(outs[(cand_dir, n)], os.O_WRONLY | os.O_TRUNC) for n in (".stdout", ".stderr")]
        cand = _fork_part(uid_c, lim, work_dir, {0: null, 1: cfd[0], 2: cfd[1], 3: s_cand.fileno()}, env,
                          lambda: pytest_driver.candidate_child(cand_dir))
        pids.append((uid_c, cand))
        rfd = [os.open(outs[(tests_dir, n)], os.O_WRONLY | os.O_TRUNC) for n in (".stdout", ".stderr")]
        if step["kind"] == "pytest":
            body = lambda: pytest_driver.runner_child(tests_dir)
        else:  # the suite driver's trusted side, from the request's source (never from a file the job can reach)
            body = lambda: pytest_driver.driver_child(tests_dir, base64.b64decode(step["driver"]).decode(),
                                                      str(step["mode"]))
        runner = _fork_part(uid_t, lim, work_dir, {0: null, 1: rfd[0], 2: rfd[1], 3: rep_fd, 4: s_run.fileno()},
                            env, body)
        pids.append((uid_t, runner))
        for fd in cfd + rfd:
            os.close(fd)
    finally:
        s_cand.close()
        s_run.close()
        os.close(null)
    timed_out, status = _wait(runner, t0 + float(lim["wall_s"]))
    cand_status = None
    try:
        got, st = os.waitpid(cand, os.WNOHANG)
        if got:
            cand_status = st
    except ChildProcessError:
        cand_status = _REAPED.pop(cand, None)
    early = cand_status is not None  # the solution's process ended before the job's end
    _kill_jobs(pids)
    status = _collect(runner, status, signal.SIGKILL)
    # the solution may have been exiting when the runner finished: keep a status not of our kill
    cand_status = _collect(cand, cand_status, None)
    _REAPED.clear()
    dt = time.monotonic() - t0
    rc, sig, out_of_cpu = _outcome(status, lim, dt)
    timed_out = timed_out or out_of_cpu
    if (cand_status is not None and os.WIFSIGNALED(cand_status) and sig is None
            and (early or os.WTERMSIG(cand_status) != signal.SIGKILL)):
        sig, rc = os.WTERMSIG(cand_status), None  # the solution's process was ended by a limit (SIGXCPU ...)
        if sig == signal.SIGXCPU:
            timed_out = True  # the solution spun until the CPU limit
    out_limit = int(lim["output_bytes"])
    out = _read_text(outs[(tests_dir, ".stdout")], out_limit)
    err = _read_text(outs[(tests_dir, ".stderr")], out_limit)
    res = {"returncode": rc, "signal": sig, "timed_out": timed_out, "duration_s": dt,
           "stdout": out, "stderr": err[: 2 * out_limit],
           "report": _parse_report_fd(rep_fd)}
    os.close(rep_fd)
    return res


def _wait(pid: int, deadline: float) -> tuple[bool, int | None]:
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


def _parse_report_fd(fd: int) -> dict:
    """The runner's report (read by the supervisor from its own descriptor of the unlinked file)."""
    chunks, off = [], 0
    while off < (64 << 20):
        b = os.pread(fd, 1 << 20, off)
        if not b:
            break
        chunks.append(b)
        off += len(b)
    rep: dict[str, Any] = {"tests": [], "bad_lines": 0}
    data = b"".join(chunks)
    if data and not data.endswith(b"\n"):
        rep["bad_lines"] += 1
    for line in data.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            rep["bad_lines"] += 1
            continue
        if not isinstance(obj, dict):
            rep["bad_lines"] += 1
            continue
        if "test" in obj and isinstance(obj["test"], list) and len(obj["test"]) == 2:
            rep["tests"].append([str(obj["test"][0]), bool(obj["test"][1])])
        for key in ("hello", "collected", "collect_error", "import_error", "alive", "protocol_errors", "done",
                    "verdict"):
            if key in obj:
                rep[key] = obj[key]
    return rep


def _cpu_exhausted(lim: dict, dt: float) -> bool:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime >= float(lim["cpu_s"]) and dt >= float(lim["cpu_s"]) * 0.5


def _new_uid() -> int:
    return _new_uids(1)[0]


def _new_uids(n: int) -> list[int]:
    """``n`` distinct uids from UID_RANGE that no live process uses (one /proc scan)."""
    used = set(_proc_uids_pids(None))
    out: list[int] = []
    for _ in range(100 * n):
        uid = random.SystemRandom().randrange(*UID_RANGE)
        if uid not in used and uid not in out:
            out.append(uid)
            if len(out) == n:
                return out
    raise RuntimeError("no free uid for a sandbox job")


def _handle(workspace: str, req: dict, counter: int, preloaded: bool) -> dict:
    private = os.geteuid() == 0 and os.environ.get("CODEGRPO_SANDBOX_UID") == "1"
    job_dir = os.path.join(workspace, "job")  # one job at a time per supervisor; a fixed path (see pytest_driver.prepare_session)
    if [s["kind"] for s in req["steps"]] in (["pytest"], ["suite"]):
        os.mkdir(job_dir, 0o711)
        try:
            uids = tuple(_new_uids(2)) if private else (None, None)
            return {"steps": [_run_pytest_step(job_dir, uids, req["steps"][0], req.get("files", {}))],
                    "collected": {}}
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
    uid = _new_uid() if private else None
    os.mkdir(job_dir, 0o700)
    try:
        for name, b64 in req.get("files", {}).items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"bad file name {name!r}")
            path = os.path.join(job_dir, name)
            with open(path, "wb") as fh:
                fh.write(base64.b64decode(b64))
            os.chmod(path, 0o755 if name == "prog" else 0o644)
        if uid is not None:
            for entry in [job_dir] + [os.path.join(job_dir, n) for n in os.listdir(job_dir)]:
                os.chown(entry, uid, uid)
        steps = []
        for step in req["steps"]:
            res = _run_step(job_dir, uid, step, preloaded)
            steps.append(res)
            if step["kind"] == "exec" and not (res["returncode"] == 0 and not res["timed_out"]):
                break
        collected = {}
        for name in req.get("collect", []):
            path = os.path.join(job_dir, name)
            if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) < (64 << 20):
                with open(path, "rb") as fh:
                    collected[name] = base64.b64encode(fh.read()).decode()
        return {"steps": steps, "collected": collected}
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def _serve(workspace: str, oneshot: bool) -> None:
    # Protocol on private fds; fd 0/1 of the supervisor are pointed at /dev/null so no job inherits them.
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.set_inheritable(rfd, False)
    os.set_inheritable(wfd, False)
    _set_dumpable(0)  # a job with the same uid cannot open /proc/<supervisor>/fd/* (the protocol pipes)
    try:  # become a subreaper so that orphaned job processes are reaped here
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except Exception:  # noqa: BLE001
        pass
    preloaded = not oneshot
    if preloaded:
        pytest_driver.preload()
        import gc

        try:
            pytest_driver.prepare_session(os.path.join(workspace, "job"))
        except Exception as exc:  # noqa: BLE001  (an incompatible pytest: jobs fall back to pytest.main)
            sys.stderr.write(f"sandbox: pytest session not prepared ({exc!r}); using pytest.main per job\n")
        gc.collect()
        gc.freeze()  # preloaded objects go to the permanent generation: cheaper gc and copy-on-write in jobs
    rin = os.fdopen(rfd, "rb")
    wout = os.fdopen(wfd, "wb")
    counter = 0
    for line in rin:
        counter += 1
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("rid")
            resp = _handle(workspace, req, counter, preloaded)
        except Exception as exc:  # noqa: BLE001
            resp = {"steps": [{"error": f"{type(exc).__name__}: {exc}", "returncode": None, "signal": None,
                               "timed_out": False}], "collected": {}}
        resp["rid"] = rid  # the request's id: the host drops a supervisor whose reply carries another
        wout.write((json.dumps(resp) + "\n").encode())
        wout.flush()
        if oneshot:
            break


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--serve", "--oneshot"):
        _serve(sys.argv[2], oneshot=(sys.argv[1] == "--oneshot"))
    else:
        sys.stderr.write("usage: supervisor.py --serve|--oneshot WORKSPACE\n")
        sys.exit(2)

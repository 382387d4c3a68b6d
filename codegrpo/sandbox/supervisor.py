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
(:mod:`codegrpo.sandbox.pytest_driver`).

The supervisor enforces the wall-clock limit (``pidfd`` + ``select``). At the end every process of the job is
killed: by private uid (``kill(-1)`` issued as that uid, repeated until a ``/proc`` scan finds none, which also
catches daemonised children that left the process group), else by process group and PID namespace. The
supervisor is a subreaper, so orphans are collected here. How a job's processes are made, limited, awaited and
killed is :mod:`codegrpo.sandbox.processes`; this module runs the jobs' steps and the request loop.

In ``--serve`` mode (the fork server) it imports pytest and prepares its session once, then freezes the heap
for the garbage collector (``gc.freeze``): a job costs a ``fork``. ``--oneshot`` answers one request and exits.

Standard library only. Run as a script it has no package on its path (``-I``), so it loads its helpers,
``../procgroup.py``, ``processes.py`` and ``pytest_driver.py`` (standard library at top level), by file path.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import sys
import time
from typing import Any

TRUNC_MARK = "\n[... output truncated ...]\n"


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
    from codegrpo.sandbox import processes, pytest_driver
else:  # run as a script inside the sandbox
    _HERE = os.path.dirname(os.path.abspath(__file__))
    procgroup = _load_by_path("_codegrpo_procgroup", os.path.join(os.path.dirname(_HERE), "procgroup.py"))
    processes = _load_by_path("_codegrpo_processes", os.path.join(_HERE, "processes.py"))
    pytest_driver = _load_by_path("_codegrpo_pytest_driver", os.path.join(_HERE, "pytest_driver.py"))

UID_RANGE = processes.UID_RANGE  # private job uids are drawn from here


def _read_text(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return ""
    text = data[:limit].decode("utf-8", "replace")
    return text + TRUNC_MARK if len(data) > limit else text


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
    env = processes.job_env(job_dir)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # ---- the job ----
        code = 127
        try:
            procgroup.become_group_leader()
            processes.set_limits(lim, uid is not None)
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
            processes.setup_failed(exc)
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
    processes.kill_job(uid, pid)
    status = processes.collect(pid, status, signal.SIGKILL)
    processes.REAPED.clear()
    dt = time.monotonic() - t0
    rc, sig, out_of_cpu = processes.outcome(status, lim, dt)
    timed_out = timed_out or out_of_cpu
    out_limit = int(lim["output_bytes"])
    res = {
        "returncode": rc,
        "signal": sig,
        "timed_out": timed_out,
        "duration_s": dt,
        "stdout": _read_text(out_path, out_limit),
        "stderr": _read_text(err_path, out_limit),
    }
    return res


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
        placed = [
            (tests_dir, "test_solution.py", files.get("test_solution.py", "")),
            (cand_dir, "solution.py", files.get("solution.py", "")),
        ]
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
    env = processes.job_env(work_dir)
    null = os.open(os.devnull, os.O_RDONLY)
    t0 = time.monotonic()
    pids = []
    try:
        cfd = [os.open(outs[(cand_dir, n)], os.O_WRONLY | os.O_TRUNC) for n in (".stdout", ".stderr")]
        cand = processes.fork_part(
            uid_c,
            lim,
            work_dir,
            {0: null, 1: cfd[0], 2: cfd[1], 3: s_cand.fileno()},
            env,
            lambda: pytest_driver.candidate_child(cand_dir),
        )
        pids.append((uid_c, cand))
        rfd = [os.open(outs[(tests_dir, n)], os.O_WRONLY | os.O_TRUNC) for n in (".stdout", ".stderr")]
        if step["kind"] == "pytest":
            body = lambda: pytest_driver.runner_child(tests_dir)
        else:  # the suite driver's trusted side, from the request's source (never from a file the job can reach)
            body = lambda: pytest_driver.driver_child(
                tests_dir, base64.b64decode(step["driver"]).decode(), str(step["mode"])
            )
        runner = processes.fork_part(
            uid_t, lim, work_dir, {0: null, 1: rfd[0], 2: rfd[1], 3: rep_fd, 4: s_run.fileno()}, env, body
        )
        pids.append((uid_t, runner))
        for fd in cfd + rfd:
            os.close(fd)
    finally:
        s_cand.close()
        s_run.close()
        os.close(null)
    timed_out, status = processes.wait_for(runner, t0 + float(lim["wall_s"]))
    cand_status = None
    try:
        got, st = os.waitpid(cand, os.WNOHANG)
        if got:
            cand_status = st
    except ChildProcessError:
        cand_status = processes.REAPED.pop(cand, None)
    early = cand_status is not None  # the solution's process ended before the job's end
    processes.kill_jobs(pids)
    status = processes.collect(runner, status, signal.SIGKILL)
    # the solution may have been exiting when the runner finished: keep a status not of our kill
    cand_status = processes.collect(cand, cand_status, None)
    processes.REAPED.clear()
    dt = time.monotonic() - t0
    rc, sig, out_of_cpu = processes.outcome(status, lim, dt)
    timed_out = timed_out or out_of_cpu
    if (
        cand_status is not None
        and os.WIFSIGNALED(cand_status)
        and sig is None
        and (early or os.WTERMSIG(cand_status) != signal.SIGKILL)
    ):
        sig, rc = os.WTERMSIG(cand_status), None  # the solution's process was ended by a limit (SIGXCPU ...)
        if sig == signal.SIGXCPU:
            timed_out = True  # the solution spun until the CPU limit
    out_limit = int(lim["output_bytes"])
    out = _read_text(outs[(tests_dir, ".stdout")], out_limit)
    err = _read_text(outs[(tests_dir, ".stderr")], out_limit)
    res = {
        "returncode": rc,
        "signal": sig,
        "timed_out": timed_out,
        "duration_s": dt,
        "stdout": out,
        "stderr": err[: 2 * out_limit],
        "report": _parse_report_fd(rep_fd),
    }
    os.close(rep_fd)
    return res


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
        for key in (
            "hello",
            "collected",
            "collect_error",
            "import_error",
            "alive",
            "protocol_errors",
            "done",
            "verdict",
        ):
            if key in obj:
                rep[key] = obj[key]
    return rep


def _handle(workspace: str, req: dict, counter: int, preloaded: bool) -> dict:
    private = os.geteuid() == 0 and os.environ.get("CODEGRPO_SANDBOX_UID") == "1"
    job_dir = os.path.join(
        workspace, "job"
    )  # one job at a time per supervisor; a fixed path (see pytest_driver.prepare_session)
    if [s["kind"] for s in req["steps"]] in (["pytest"], ["suite"]):
        os.mkdir(job_dir, 0o711)
        try:
            uids = tuple(processes.new_uids(2)) if private else (None, None)
            return {"steps": [_run_pytest_step(job_dir, uids, req["steps"][0], req.get("files", {}))], "collected": {}}
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
    uid = processes.new_uid() if private else None
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
    processes.set_dumpable(0)  # a job with the same uid cannot open /proc/<supervisor>/fd/* (the protocol pipes)
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
            resp = {
                "steps": [
                    {"error": f"{type(exc).__name__}: {exc}", "returncode": None, "signal": None, "timed_out": False}
                ],
                "collected": {},
            }
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

"""Execution sandbox for untrusted programs: Python solutions under pytest, and compiled C binaries.

Isolation (OS mechanisms, not Python-level patching):

* **Namespaces (bubblewrap).** Every job runs under a *supervisor* process started with ``bwrap``: a new
  network namespace (no interface but an isolated loopback, so nothing outside is reachable), a new PID
  namespace, IPC and UTS namespaces, the whole filesystem bound read-only, fresh ``/tmp`` and ``/dev/shm``
  that only root may write, and ``--die-with-parent``.
* **A private uid per job** (when the host process is root): the supervisor forks the job, sets its
  resource limits, then drops to a uid/gid that no other process uses. The job's scratch directory is the only
  place that uid may write (mode 0700, owned by it; its parent is root-owned 0711). ``RLIMIT_NPROC`` then bounds
  exactly the job's processes, and at the end every process of that uid is killed (``kill(-1)`` issued as
  the uid, repeated until a ``/proc`` scan finds none), which also catches daemonised children that left
  the process group.
* **Resource limits** (``setrlimit`` in the forked job): CPU seconds, address space, processes, file size,
  open files, no core dumps. A wall-clock limit is enforced by the supervisor (``pidfd`` + ``select``).
* **Scrubbed environment:** the supervisor and the job get a fixed minimal environment; nothing of the
  caller's environment (tokens, keys) is passed through.
* **Output limits:** the job's stdout/stderr go to files bounded by ``RLIMIT_FSIZE``; only the first
  ``output_bytes`` are returned.

Speed: :class:`Sandbox` keeps supervisors alive as *fork servers* with pytest already imported, so a job
costs a ``fork`` instead of an interpreter start plus ``import pytest``. ``mode="fresh"`` starts a new
supervisor per job (the baseline measured by ``benchmarks/bench_sandbox.py``); both modes run the same
job code under the same isolation.

Fallbacks are explicit and logged once: without ``bwrap`` (or if it cannot create namespaces) jobs run
without network/filesystem namespaces; without root there is no private uid, so processes are tracked by
session and the PID namespace only. :func:`sandbox_info` reports what is in use.

This module imports only the standard library at top level: the supervisor runs it as a script
(``python -I execution.py --serve DIR``) inside the sandbox.

Known limit (shared with KodCode's own harness): the solution runs in the same process as the test
runner, so a hostile solution can tamper with pytest's reporting. Rewards computed from these results
must be treated as untrusted signals, which is what GRPO rewards are.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import json
import logging
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

log = logging.getLogger(__name__)

_THIS_FILE = os.path.abspath(__file__)
_UID_RANGE = (200_000, 1_200_000)
_TRUNC_MARK = "\n[... output truncated ...]\n"


# ---------------------------------------------------------------------------------------------------------
# Public data types
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SandboxLimits:
    """Per-job limits. ``wall_s`` is wall-clock time; ``cpu_s`` is CPU time (RLIMIT_CPU)."""

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    nproc: int = 64
    fsize_mb: int = 16
    nofile: int = 256
    output_bytes: int = 16384

    @classmethod
    def from_config(cls, cfg: dict | None) -> "SandboxLimits":
        """Build limits from the ``sandbox`` config section (unknown keys are ignored)."""
        cfg = dict(cfg or {})
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in cfg.items() if k in names})

    def with_timeout(self, timeout_s: float | None) -> "SandboxLimits":
        if timeout_s is None:
            return self
        return dataclasses.replace(self, wall_s=float(timeout_s), cpu_s=max(1, int(-(-float(timeout_s) // 1))))


@dataclass
class PytestResult:
    """Outcome of running a KodCode-style test file against a solution."""

    executed: bool  # the solution module was imported without error within the limits
    passed: int  # test items that passed
    total: int  # test items collected (test functions in the file when collection failed)
    timed_out: bool
    collection_error: bool = False
    error: str | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    mechanism: str = ""
    returncode: int | None = None  # exit status of the test process (None when killed by a signal)
    signal: int | None = None  # the signal that ended it (e.g. SIGXCPU at the CPU limit, SIGXFSZ at the file limit)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


@dataclass
class ExecResult:
    """Outcome of one program run (a compiled binary, or the compiler itself)."""

    returncode: int | None  # None when killed by a signal
    signal: int | None
    timed_out: bool
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    mechanism: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@dataclass
class CompileResult:
    ok: bool
    binary: bytes | None
    result: ExecResult
    command: list[str] = field(default_factory=list)


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program under test)."""


# ---------------------------------------------------------------------------------------------------------
# Mechanism detection (host side)
# ---------------------------------------------------------------------------------------------------------
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


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


def _supervisor_env(pidns: bool, private_uid: bool = False) -> dict[str, str]:
    env = {"CODEGRPO_SANDBOX_UID": "1" if private_uid else "0","PATH": f"{os.path.dirname(sys.executable)}:{_SAFE_PATH}", "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "HOME": "/nonexistent"}
    if pidns:
        env["CODEGRPO_SANDBOX_PIDNS"] = "1"
    return env


def _needed_paths() -> list[str]:
    """Directories the job's interpreter must be able to read (Python installation, virtual environment)."""
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.realpath(_THIS_FILE))}  # the supervisor runs this file
    return sorted(os.path.realpath(p) for p in paths if p)


def _world_traversable(path: str) -> bool:
    cur = "/"
    for part in Path(path).parts[1:]:
        cur = os.path.join(cur, part)
        try:
            if not os.stat(cur).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _closed_ancestors() -> list[tuple[str, list[str]]]:
    """(closed dir, needed paths under it): e.g. a Python under /root (mode 0700) that the job uid must read.

    Each closed dir is replaced by an empty tmpfs in the sandbox and only the needed paths are bound back in,
    so the rest of it (a home directory with keys and tokens) stays invisible.
    """
    out: dict[str, list[str]] = {}
    for path in _needed_paths():
        cur = "/"
        for part in Path(path).parts[1:]:
            cur = os.path.join(cur, part)
            try:
                closed = not os.stat(cur).st_mode & 0o001
            except OSError:
                break
            if closed and cur != path:
                out.setdefault(cur, []).append(path)
                break
    return sorted(out.items())


# Replaced by an empty tmpfs in every sandbox (the job's private /tmp, /dev/shm, /run).
_MASKED_DIRS = ("/tmp", "/dev/shm", "/run")


def _bind_back(argv: list[str], top: str, path: str, made: set[str]) -> None:
    """Bind ``path`` read-only inside ``top`` (a fresh tmpfs), creating its parents there with mode 0755
    (bwrap would create missing parents with mode 0700, which the job uid could not traverse)."""
    cur = top
    for part in Path(path).relative_to(top).parts[:-1]:
        cur = os.path.join(cur, part)
        if cur not in made:
            argv += ["--perms", "0755", "--dir", cur]
            made.add(cur)
    argv += ["--ro-bind", path, path]
    made.add(path)


def _bwrap_argv(workspace: str) -> list[str]:
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
    ]
    for masked in _MASKED_DIRS:
        argv += ["--perms", "0755", "--tmpfs", masked]
    bound: set[str] = set()
    for closed, needed in _closed_ancestors():
        argv += ["--perms", "0755", "--tmpfs", closed]
        made = {closed}
        for path in needed:
            _bind_back(argv, closed, path, made)
        bound.update(needed)
    # The interpreter, the virtual environment or this package may live under a masked dir (a checkout or a
    # venv in /tmp): bind them back, read-only, into the fresh tmpfs.
    made = set(_MASKED_DIRS)
    for path in _needed_paths():
        top = next((m for m in _MASKED_DIRS if path.startswith(m + "/")), None)
        if top and path not in bound:
            _bind_back(argv, top, path, made)
    argv += [
        "--bind", workspace, workspace,
        "--chdir", workspace,
    ]
    if os.geteuid() == 0:
        # Root: keep only what the supervisor needs to prepare job directories and drop to the job uid.
        argv += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL",
                    "CAP_SYS_RESOURCE"):
            argv += ["--cap-add", cap]
    else:
        argv += ["--unshare-user"]
    return argv


@dataclass(frozen=True)
class SandboxInfo:
    mechanism: str  # "bwrap" or "rlimits"
    private_uid: bool
    reason: str


_INFO: SandboxInfo | None = None
_INFO_LOCK = threading.Lock()


def sandbox_info() -> SandboxInfo:
    """Detect (once) which isolation is available here, and log the decision."""
    global _INFO
    with _INFO_LOCK:
        if _INFO is not None:
            return _INFO
        private_uid = os.geteuid() == 0
        forced = os.environ.get("CODEGRPO_SANDBOX_MECHANISM", "").strip().lower()
        mech, reason = "rlimits", ""
        if forced == "rlimits":
            reason = "CODEGRPO_SANDBOX_MECHANISM=rlimits"
        elif not shutil.which("bwrap"):
            reason = "bwrap not found on PATH (install the Debian package bubblewrap)"
        else:
            ws = tempfile.mkdtemp(prefix="codegrpo-sbx-probe-")
            try:
                proc = subprocess.run(_bwrap_argv(ws) + ["--", "/bin/true"], capture_output=True, text=True,
                                      timeout=30, env=_supervisor_env(False))
                if proc.returncode == 0:
                    mech, reason = "bwrap", "bwrap namespaces available"
                else:
                    reason = f"bwrap cannot create namespaces here: {proc.stderr.strip()[:300]}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                reason = f"bwrap probe failed: {exc}"
            finally:
                shutil.rmtree(ws, ignore_errors=True)
        if forced == "bwrap" and mech != "bwrap":
            raise SandboxError(f"CODEGRPO_SANDBOX_MECHANISM=bwrap but {reason}")
        if not private_uid:
            reason += "; not root, so no private uid per job (processes tracked by session/PID namespace)"
        elif mech != "bwrap" and not all(_world_traversable(p) for p in _needed_paths()):
            private_uid = False
            reason += ("; the Python installation is not readable by other uids and there is no mount namespace"
                       " to expose it, so no private uid per job")
        _INFO = SandboxInfo(mech, private_uid, reason)
        level = logging.INFO if mech == "bwrap" and private_uid else logging.WARNING
        log.log(level, "sandbox: mechanism=%s private_uid=%s (%s)", mech, private_uid, reason)
        return _INFO


# ---------------------------------------------------------------------------------------------------------
# Supervisor client (host side)
# ---------------------------------------------------------------------------------------------------------
class _Supervisor:
    """One supervisor process; it runs jobs one at a time (fork server) or exactly one (fresh)."""

    def __init__(self, info: SandboxInfo, oneshot: bool):
        self.info = info
        self.oneshot = oneshot
        self.proc: subprocess.Popen | None = None
        self.workspace: str | None = None
        self.lock = threading.Lock()
        self._buf = b""

    def start(self) -> None:
        base = os.environ.get("CODEGRPO_SANDBOX_DIR") or None
        if base:
            os.makedirs(base, exist_ok=True)
        self.workspace = tempfile.mkdtemp(prefix="codegrpo-sbx-", dir=base)
        os.chmod(self.workspace, 0o711)
        py = [sys.executable, "-I", _THIS_FILE, "--oneshot" if self.oneshot else "--serve", self.workspace]
        if self.info.mechanism == "bwrap":
            argv = _bwrap_argv(self.workspace) + ["--"] + py
        else:
            argv = py
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=_supervisor_env(self.info.mechanism == "bwrap", self.info.private_uid),
                                     cwd=self.workspace, start_new_session=True, close_fds=True)
        self._buf = b""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(self, req: dict, timeout_s: float) -> dict:
        if not self.alive():
            self.start()
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            self.close()
            raise SandboxError(f"sandbox supervisor died before the job: {exc}") from exc
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise SandboxError(f"sandbox supervisor gave no answer within {timeout_s:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self.close()
                    raise SandboxError("sandbox supervisor exited without an answer")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        if self.oneshot:
            self.close()
        return json.loads(line)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                if proc.stdin:
                    proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
        if self.workspace:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None


class Sandbox:
    """A pool of sandbox supervisors.

    ``mode="server"`` (default) keeps each supervisor alive with pytest imported and forks one job at a time;
    ``mode="fresh"`` starts a new supervisor (a new interpreter) for every job. ``workers`` supervisors run
    jobs in parallel when called from several threads (see :meth:`run_tests_many`).
    """

    def __init__(self, limits: SandboxLimits | None = None, mode: str = "server", workers: int = 1):
        if mode not in ("server", "fresh"):
            raise ValueError(f"sandbox mode must be 'server' or 'fresh', got {mode!r}")
        self.limits = limits or SandboxLimits()
        self.mode = mode
        self.info = sandbox_info()
        self._sups = [_Supervisor(self.info, oneshot=(mode == "fresh")) for _ in range(max(1, int(workers)))]
        self._free = list(self._sups)
        self._cv = threading.Condition()
        self._closed = False

    @property
    def mechanism(self) -> str:
        return f"{self.info.mechanism}{'+uid' if self.info.private_uid else ''}/{self.mode}"

    # -- pool --------------------------------------------------------------------------------------------
    def _acquire(self) -> _Supervisor:
        with self._cv:
            while not self._free:
                self._cv.wait()
            return self._free.pop()

    def _release(self, sup: _Supervisor) -> None:
        with self._cv:
            self._free.append(sup)
            self._cv.notify()

    def _submit(self, req: dict, budget_s: float) -> dict:
        if self._closed:
            raise SandboxError("sandbox is closed")
        sup = self._acquire()
        try:
            with sup.lock:
                try:
                    return sup.request(req, budget_s + 30.0)
                except SandboxError:
                    # One retry on a fresh supervisor: the job itself cannot kill its supervisor (different uid),
                    # but the host may be under memory pressure.
                    sup.close()
                    return sup.request(req, budget_s + 30.0)
        finally:
            self._release(sup)

    def close(self) -> None:
        self._closed = True
        for sup in self._sups:
            with sup.lock:
                sup.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- jobs --------------------------------------------------------------------------------------------
    def run_tests(self, solution_code: str, test_code: str, timeout_s: float | None = None,
                  limits: SandboxLimits | None = None) -> PytestResult:
        """KodCode's harness: ``solution.py`` + ``test_solution.py`` (``from solution import *`` + tests), pytest."""
        lim = (limits or self.limits).with_timeout(timeout_s)
        files = {"solution.py": _b64(solution_code), "test_solution.py": _b64(kodcode_test_file(test_code))}
        req = {"steps": [{"kind": "pytest", "limits": dataclasses.asdict(lim)}], "files": files, "collect": []}
        t0 = time.monotonic()
        resp = self._submit(req, lim.wall_s)
        step = resp["steps"][0]
        return _pytest_result(step, test_code, time.monotonic() - t0, self.mechanism)

    def run_tests_many(self, items: Sequence[tuple[str, str]], timeout_s: float | None = None,
                       limits: SandboxLimits | None = None) -> list[PytestResult]:
        """Run many (solution, tests) pairs on the pool's supervisors in parallel; results in input order."""
        from concurrent.futures import ThreadPoolExecutor

        if len(self._sups) == 1 or len(items) <= 1:
            return [self.run_tests(s, t, timeout_s, limits) for s, t in items]
        with ThreadPoolExecutor(max_workers=len(self._sups)) as ex:
            return list(ex.map(lambda st: self.run_tests(st[0], st[1], timeout_s, limits), items))

    def run_python(self, script: str, files: dict[str, str | bytes] | None = None, args: Sequence[str] = (),
                   stdin: str | None = None, timeout_s: float | None = None, limits: SandboxLimits | None = None,
                   collect: Sequence[str] = ()) -> tuple[ExecResult, dict[str, bytes]]:
        """Run ``python main.py ARGS`` (``script`` as ``main.py``) in a job directory holding ``files``.

        The same isolation and limits as every other job; the interpreter is this process's. Returns the run's
        :class:`ExecResult` and the bytes of each file named in ``collect`` that the job left in its directory
        (untrusted: the job may have written anything there).
        """
        lim = (limits or self.limits).with_timeout(timeout_s)
        payload = {"main.py": _b64(script)}
        for name, data in (files or {}).items():
            payload[name] = base64.b64encode(data).decode() if isinstance(data, bytes) else _b64(data)
        step = {"kind": "exec", "argv": [sys.executable, "main.py", *map(str, args)],
                "limits": dataclasses.asdict(lim), "stdin": _b64(stdin) if stdin is not None else None}
        resp = self._submit({"steps": [step], "files": payload, "collect": list(collect)}, lim.wall_s)
        got = {k: base64.b64decode(v) for k, v in (resp.get("collected") or {}).items()}
        return _exec_result(resp["steps"][0], self.mechanism), got

    def compile_c(self, source: str | os.PathLike, timeout_s: float | None = None,
                  flags: Sequence[str] = ("-O0",), libs: Sequence[str] = ("-lm",),
                  limits: SandboxLimits | None = None) -> CompileResult:
        """Compile C with ``gcc <flags> prog.c -o prog <libs>`` inside the sandbox; returns the binary bytes."""
        src = _read_source(source)
        lim = (limits or self.limits).with_timeout(timeout_s)
        argv = ["gcc", *flags, "prog.c", "-o", "prog", *libs]
        req = {"steps": [{"kind": "exec", "argv": argv, "limits": dataclasses.asdict(lim)}],
               "files": {"prog.c": _b64(src)}, "collect": ["prog"]}
        resp = self._submit(req, lim.wall_s)
        res = _exec_result(resp["steps"][0], self.mechanism)
        binary = base64.b64decode(resp["collected"]["prog"]) if resp.get("collected", {}).get("prog") else None
        return CompileResult(ok=res.ok and binary is not None, binary=binary, result=res, command=argv)

    def run_binary(self, program: str | bytes | os.PathLike, args: Sequence[str] = (),
                   timeout_s: float | None = None, stdin: str | None = None,
                   compile_timeout_s: float | None = None, limits: SandboxLimits | None = None,
                   flags: Sequence[str] = ("-O0",), libs: Sequence[str] = ("-lm",)) -> ExecResult:
        """Run a C program in the sandbox; pass iff ``.ok`` (exit status 0, no timeout).

        ``program`` is C source text, a path to a ``.c`` file (compiled in the sandbox first with ``gcc -O0
        ... -lm``), a path to an executable, or the executable's bytes. A compile failure is returned as the
        compiler's :class:`ExecResult` (non-zero ``returncode``).
        """
        lim = (limits or self.limits).with_timeout(timeout_s)
        clim = (limits or self.limits).with_timeout(compile_timeout_s or max(lim.wall_s, 30.0))
        steps, files = [], {}
        if isinstance(program, bytes):
            files["prog"] = base64.b64encode(program).decode()
        elif isinstance(program, os.PathLike) or (isinstance(program, str) and "\n" not in program
                                                  and os.path.isfile(program)):
            path = Path(program)
            data = path.read_bytes()
            if path.suffix == ".c":
                files["prog.c"] = base64.b64encode(data).decode()
            else:
                files["prog"] = base64.b64encode(data).decode()
        else:
            files["prog.c"] = _b64(str(program))
        if "prog.c" in files:
            steps.append({"kind": "exec", "argv": ["gcc", *flags, "prog.c", "-o", "prog", *libs],
                          "limits": dataclasses.asdict(clim)})
        steps.append({"kind": "exec", "argv": ["./prog", *map(str, args)], "limits": dataclasses.asdict(lim),
                      "stdin": _b64(stdin) if stdin is not None else None, "mode": 0o755})
        resp = self._submit({"steps": steps, "files": files, "collect": []}, lim.wall_s + clim.wall_s)
        return _exec_result(resp["steps"][-1], self.mechanism)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()


def _read_source(source: str | os.PathLike) -> str:
    if isinstance(source, os.PathLike) or ("\n" not in str(source) and os.path.isfile(str(source))):
        return Path(source).read_text(encoding="utf-8", errors="replace")
    return str(source)


def kodcode_test_file(test_code: str) -> str:
    """The test module as KodCode runs it: ``from solution import *`` followed by the tests."""
    return "from solution import *\n" + test_code


def count_test_functions(test_code: str) -> int:
    """Test functions pytest would collect from a file by name (``test_*`` functions, methods of ``Test*``)."""
    try:
        tree = ast.parse(test_code)
    except SyntaxError:
        return 0
    n = 0
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            n += 1
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            n += sum(1 for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and b.name.startswith("test"))
    return n


def _pytest_result(step: dict, test_code: str, dt: float, mech: str) -> PytestResult:
    rep = step.get("report") or {}
    collected = rep.get("collected")
    collection_error = bool(rep.get("collect_error"))
    outcomes: dict[str, bool] = {}
    for nodeid, ok in rep.get("tests", []):
        outcomes[nodeid] = outcomes.get(nodeid, True) and bool(ok)
    passed = sum(1 for ok in outcomes.values() if ok)
    if collection_error:
        passed = 0
    total = collected if (collected and not collection_error) else max(count_test_functions(test_code), 1)
    total = max(total, len(outcomes))
    executed = bool(rep.get("executed"))
    return PytestResult(executed=executed, passed=passed, total=total, timed_out=bool(step.get("timed_out")),
                        collection_error=collection_error, error=rep.get("import_error") or step.get("error"),
                        stdout=step.get("stdout", ""), stderr=step.get("stderr", ""), duration_s=dt, mechanism=mech,
                        returncode=step.get("returncode"), signal=step.get("signal"))


def _exec_result(step: dict, mech: str) -> ExecResult:
    return ExecResult(returncode=step.get("returncode"), signal=step.get("signal"),
                      timed_out=bool(step.get("timed_out")), stdout=step.get("stdout", ""),
                      stderr=step.get("stderr", "") + (f"\n[sandbox] {step['error']}" if step.get("error") else ""),
                      duration_s=float(step.get("duration_s", 0.0)), mechanism=mech)


# ---------------------------------------------------------------------------------------------------------
# Module-level convenience API (a shared default sandbox)
# ---------------------------------------------------------------------------------------------------------
_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process-wide sandbox (fork-server mode), created on first use and closed at exit.

    Limits come from ``CODEGRPO_SANDBOX_LIMITS`` (JSON) when set; workers from ``CODEGRPO_SANDBOX_WORKERS``.
    """
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT._closed:
            lim = SandboxLimits.from_config(json.loads(os.environ.get("CODEGRPO_SANDBOX_LIMITS", "{}")))
            workers = int(os.environ.get("CODEGRPO_SANDBOX_WORKERS", "0")) or min(4, os.cpu_count() or 1)
            _DEFAULT = Sandbox(lim, mode="server", workers=workers)
            import atexit

            atexit.register(_DEFAULT.close)
        return _DEFAULT


def run_tests(solution_code: str, test_code: str, timeout_s: float | None = None,
              limits: SandboxLimits | None = None, sandbox: Sandbox | None = None) -> PytestResult:
    """Run KodCode-style tests (``test_solution.py`` importing ``solution``) on a solution, sandboxed."""
    return (sandbox or default_sandbox()).run_tests(solution_code, test_code, timeout_s, limits)


def run_binary(program: str | bytes | os.PathLike, args: Sequence[str] = (), timeout_s: float | None = None,
               stdin: str | None = None, limits: SandboxLimits | None = None,
               sandbox: Sandbox | None = None, **kw: Any) -> ExecResult:
    """Compile (if given C source or a ``.c`` path) and run a C program sandboxed; pass iff ``.ok``."""
    return (sandbox or default_sandbox()).run_binary(program, args, timeout_s, stdin, limits=limits, **kw)


def compile_c(source: str | os.PathLike, out_path: str | os.PathLike | None = None,
              timeout_s: float | None = None, sandbox: Sandbox | None = None, **kw: Any) -> CompileResult:
    """Compile C in the sandbox; with ``out_path`` the binary is written there atomically (mode 0755)."""
    res = (sandbox or default_sandbox()).compile_c(source, timeout_s, **kw)
    if out_path is not None and res.binary is not None:
        out = Path(out_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        tmp.write_bytes(res.binary)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    return res


# =========================================================================================================
# Supervisor side (runs inside the sandbox, as a script; standard library + pytest only)
# =========================================================================================================
def _read_text(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return ""
    text = data[:limit].decode("utf-8", "replace")
    return text + _TRUNC_MARK if len(data) > limit else text


def _proc_uid_pids(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid`` (a /proc scan)."""
    out = []
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
        if uid_line and int(uid_line[1]) == uid and state != "Z":
            out.append(int(name))
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


def _kill_job(uid: int | None, pgid: int) -> None:
    """Kill every process of the job: by private uid when there is one, else its process group / PID ns."""
    for _ in range(200):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if uid is not None:
            pids = _proc_uid_pids(uid)
            if not pids:
                _reap()
                return
            killer = os.fork()
            if killer == 0:  # kill(-1) as the job uid reaches exactly that uid's processes
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


# pytest plugins a KodCode test never needs (caches, reports to files, debugger, doctest collection ...);
# leaving them out makes each run cheaper. Fixtures tests use (tmp_path, monkeypatch, capsys, caplog,
# recwarn) stay available.
_PYTEST_NO_PLUGINS = [a for name in ("cacheprovider", "stepwise", "unraisableexception", "threadexception",
                                     "pastebin", "junitxml", "doctest", "legacypath", "setuponly", "setupplan",
                                     "debugging", "faulthandler") for a in ("-p", f"no:{name}")]


_REPORT_FD = 3  # the job's report file descriptor (set up by _run_step)


def _emit(obj) -> None:
    try:
        os.write(_REPORT_FD, (json.dumps(obj) + "\n").encode())
    except OSError:
        pass


class _Reporter:
    """pytest plugin: collected count, collection errors and each test's outcome, as JSON lines on fd 3."""

    def pytest_collectreport(self, report):
        if report.failed:
            _emit({"collect_error": True})

    def pytest_collection_finish(self, session):
        _emit({"collected": len(session.items)})

    def pytest_runtest_logreport(self, report):
        ok = report.passed if report.when == "call" else not report.failed
        if report.when == "call" or report.failed:
            _emit({"test": [report.nodeid, bool(ok and not getattr(report, "wasxfail", False))]})


def _pytest_args(job_dir: str) -> list[str]:
    return ["-q", *_PYTEST_NO_PLUGINS, "--rootdir", job_dir, "--confcutdir", job_dir,
            "-c", os.path.join(job_dir, ".pytest.ini"), "-o", "addopts=", "--capture=no",
            "-W", "ignore::DeprecationWarning", os.path.join(job_dir, "test_solution.py")]


def _import_solution(job_dir: str) -> bool:
    import importlib
    import tempfile as _tempfile

    _tempfile.tempdir = None  # recomputed from this job's TMPDIR
    sys.path.insert(0, job_dir)
    sys.dont_write_bytecode = True
    try:
        importlib.import_module("solution")
    except BaseException as exc:  # noqa: BLE001  (SystemExit, MemoryError ... all mean "did not execute")
        _emit({"executed": False, "import_error": f"{type(exc).__name__}: {exc}"[:2000]})
        return False
    _emit({"executed": True})
    return True


def _pytest_child(job_dir: str) -> int:
    """Runs in the forked job process (already limited and unprivileged): import the solution, run pytest."""
    if not _import_solution(job_dir):
        return 3
    if _PREPARED is not None:
        return _run_prepared_session()
    import pytest

    with open(os.path.join(job_dir, ".pytest.ini"), "w") as fh:
        fh.write("[pytest]\n")
    try:
        return int(pytest.main(_pytest_args(job_dir), plugins=[_Reporter()]))
    except BaseException as exc:  # noqa: BLE001
        _emit({"collect_error": True, "error": repr(exc)[:500]})
        return 4


# Fork-server mode: the supervisor configures pytest and starts its session once, for the fixed job path of
# this supervisor; each job then only collects and runs (pytest's own per-session set-up is not repeated).
# Nothing about the test file is known at that point, so the outcome is the same as pytest.main's (checked by
# benchmarks/bench_sandbox.py and tests/test_execution.py).
_PREPARED: tuple | None = None


def _prepare_session(job_dir: str) -> None:
    global _PREPARED
    from _pytest.config import _prepareconfig
    from _pytest.main import Session

    os.makedirs(job_dir, exist_ok=True)
    with open(os.path.join(job_dir, ".pytest.ini"), "w") as fh:
        fh.write("[pytest]\n")
    config = _prepareconfig(_pytest_args(job_dir), plugins=[_Reporter()])
    session = Session.from_config(config)
    session.exitstatus = 0
    config._do_configure()
    config.hook.pytest_sessionstart(session=session)
    sys.stdout.flush()
    _PREPARED = (config, session)
    shutil.rmtree(job_dir, ignore_errors=True)


def _run_prepared_session() -> int:
    from _pytest.outcomes import Exit

    config, session = _PREPARED
    try:
        config.hook.pytest_collection(session=session)
        config.hook.pytest_runtestloop(session=session)
        status = 1 if session.testsfailed else (5 if session.testscollected == 0 else 0)
    except (KeyboardInterrupt, Exit):  # Session.Interrupted (collection errors) is a KeyboardInterrupt
        status = 2
    except BaseException as exc:  # noqa: BLE001
        _emit({"collect_error": True, "error": repr(exc)[:500]})
        status = 3
    session.exitstatus = status
    try:
        config.hook.pytest_sessionfinish(session=session, exitstatus=status)
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):  # the reporter writes to the latter
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    return status


def _run_step(job_dir: str, uid: int | None, step: dict, preloaded: bool) -> dict:
    lim = step["limits"]
    report_path = os.path.join(job_dir, ".report.jsonl")
    out_path, err_path = os.path.join(job_dir, ".stdout"), os.path.join(job_dir, ".stderr")
    in_path = os.path.join(job_dir, ".stdin")
    for p in (report_path, out_path, err_path):
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
            os.setsid()
            _set_limits(lim, uid is not None)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            os.chdir(job_dir)
            fin = os.open(in_path if step.get("stdin") else os.devnull, os.O_RDONLY)
            fout = os.open(out_path, os.O_WRONLY | os.O_TRUNC)
            ferr = os.open(err_path, os.O_WRONLY | os.O_TRUNC)
            frep = os.open(report_path, os.O_WRONLY | os.O_APPEND)
            os.dup2(fin, 0)
            os.dup2(fout, 1)
            os.dup2(ferr, 2)
            os.dup2(frep, 3)
            os.closerange(4, 65536)  # the supervisor's protocol pipes must not reach the job
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
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                code = _pytest_child(job_dir)
                sys.stdout.flush()
                sys.stderr.flush()
        except BaseException as exc:  # noqa: BLE001
            try:
                os.write(2, f"sandbox job setup failed: {exc!r}\n".encode())
            except OSError:
                pass
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
    if status is None:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = _REAPED.pop(pid, signal.SIGKILL)
    _REAPED.clear()
    dt = time.monotonic() - t0
    rc = sig = None
    if os.WIFEXITED(status):
        rc = os.WEXITSTATUS(status)
    elif os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and _cpu_exhausted(lim, dt)):
            timed_out = True
    out_limit = int(lim["output_bytes"])
    res = {"returncode": rc, "signal": sig, "timed_out": timed_out, "duration_s": dt,
           "stdout": _read_text(out_path, out_limit), "stderr": _read_text(err_path, out_limit)}
    if step["kind"] == "pytest":
        res["report"] = _parse_report(report_path)
    return res


def _cpu_exhausted(lim: dict, dt: float) -> bool:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime >= float(lim["cpu_s"]) and dt >= float(lim["cpu_s"]) * 0.5


def _parse_report(path: str) -> dict:
    rep: dict[str, Any] = {"executed": False, "tests": []}
    try:
        with open(path, "rb") as fh:
            data = fh.read(4 << 20)
    except OSError:
        return rep
    for line in data.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if "test" in obj and isinstance(obj["test"], list) and len(obj["test"]) == 2:
            rep["tests"].append([str(obj["test"][0]), bool(obj["test"][1])])
        for key in ("executed", "collected", "collect_error", "import_error"):
            if key in obj:
                rep[key] = obj[key]
    return rep


def _new_uid() -> int:
    for _ in range(100):
        uid = random.SystemRandom().randrange(*_UID_RANGE)
        if not _proc_uid_pids(uid):
            return uid
    raise SandboxError("no free uid for a sandbox job")


def _handle(workspace: str, req: dict, counter: int, preloaded: bool) -> dict:
    uid = _new_uid() if os.geteuid() == 0 and os.environ.get("CODEGRPO_SANDBOX_UID") == "1" else None
    job_dir = os.path.join(workspace, "job")  # one job at a time per supervisor; a fixed path (see _PREPARED)
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


def _preload() -> None:
    """Import pytest, every built-in pytest plugin and the stdlib modules they pull in lazily."""
    import importlib

    import pytest  # noqa: F401  (the fork server's point: jobs start with pytest imported)
    from _pytest.config import default_plugins, essential_plugins

    for name in sorted(set(default_plugins) | set(essential_plugins)):
        try:
            importlib.import_module(f"_pytest.{name}")
        except Exception:  # noqa: BLE001
            pass
    for name in ("unittest", "doctest", "pdb", "typing", "collections", "itertools", "functools", "math",
                 "re", "heapq", "bisect", "string", "random", "decimal", "fractions", "datetime", "timeit"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            pass


def _serve(workspace: str, oneshot: bool) -> None:
    # Protocol on private fds; fd 0/1 of the supervisor are pointed at /dev/null so no job inherits them.
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.set_inheritable(rfd, False)
    os.set_inheritable(wfd, False)
    try:  # become a subreaper so that orphaned job processes are reaped here
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except Exception:  # noqa: BLE001
        pass
    preloaded = not oneshot
    if preloaded:
        _preload()
        import gc

        try:
            _prepare_session(os.path.join(workspace, "job"))
        except Exception as exc:  # noqa: BLE001  (an incompatible pytest: jobs fall back to pytest.main)
            sys.stderr.write(f"sandbox: pytest session not prepared ({exc!r}); using pytest.main per job\n")
        gc.collect()
        gc.freeze()  # preloaded objects go to the permanent generation: cheaper gc and copy-on-write in jobs
    rin = os.fdopen(rfd, "rb")
    wout = os.fdopen(wfd, "wb")
    counter = 0
    for line in rin:
        counter += 1
        try:
            resp = _handle(workspace, json.loads(line), counter, preloaded)
        except Exception as exc:  # noqa: BLE001
            resp = {"steps": [{"error": f"{type(exc).__name__}: {exc}", "returncode": None, "signal": None,
                               "timed_out": False}], "collected": {}}
        wout.write((json.dumps(resp) + "\n").encode())
        wout.flush()
        if oneshot:
            break


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--serve", "--oneshot"):
        _serve(sys.argv[2], oneshot=(sys.argv[1] == "--oneshot"))
    else:
        sys.stderr.write("usage: execution.py --serve|--oneshot WORKSPACE\n")
        sys.exit(2)

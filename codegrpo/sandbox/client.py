"""The host side of the sandbox: a pool of supervisors and the job API the rest of the code uses.

:class:`Sandbox` starts *supervisors* (:mod:`codegrpo.sandbox.supervisor`, under ``bwrap`` when available:
:mod:`codegrpo.sandbox.bwrap`) and sends them jobs as JSON lines: KodCode's pytest harness
(:meth:`Sandbox.run_tests`, :meth:`Sandbox.run_tests_many`), C compilation (:meth:`Sandbox.compile_c`) and
compiled programs (:meth:`Sandbox.run_binary`). ``mode="server"`` keeps each supervisor alive as a fork server
with pytest already imported, so a job costs a ``fork``; ``mode="fresh"`` starts a new supervisor per job (the
baseline measured by ``benchmarks/bench_sandbox.py``); both run the same job code under the same isolation.

:func:`make_sandbox` builds a pool from the config's ``sandbox`` section; :func:`default_sandbox` is the
process-wide pool the rewards use (configured by the training run's settings.json inside a training run, else by
``CODEGRPO_SANDBOX_LIMITS`` / ``CODEGRPO_SANDBOX_WORKERS`` and the schema's defaults).

Every supervisor is started with :func:`codegrpo.procgroup.popen_group` and stopped with ``stop_group``. Its
stderr is kept in a temporary file: when a supervisor dies without answering, the error carries its exit status
and the end of that stderr (e.g. ``bwrap: execvp ...: No such file or directory``); before a supervisor starts,
:func:`codegrpo.sandbox.bwrap.check_reachable` refuses a sandbox that could not see its interpreter or files.

Standard library (and :mod:`codegrpo.procgroup`) only.
"""

from __future__ import annotations

from codegrpo.contracts import parse_python
import ast
import base64
import dataclasses
import json
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.procgroup import popen_group, stop_group
from codegrpo.sandbox import bwrap
from codegrpo.sandbox.bwrap import sandbox_info
from codegrpo.sandbox.types import (CompileResult, ExecResult, PytestResult, SandboxError, SandboxInfo,
                                    SandboxLimits)

WRITE_FAILED = 97  # the runner's exit status after a failed report write (pytest_driver.WRITE_FAILED)

__all__ = ["Sandbox", "make_sandbox", "default_sandbox", "run_tests", "run_binary", "compile_c",
           "kodcode_test_file", "count_test_functions"]

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_STDERR_TAIL = 2000  # bytes of a dead supervisor's stderr quoted in the error


def _supervisor_env(interp: str, pidns: bool, private_uid: bool) -> dict[str, str]:
    env = {"CODEGRPO_SANDBOX_UID": "1" if private_uid else "0", "PATH": f"{os.path.dirname(interp)}:{_SAFE_PATH}",
           "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "HOME": "/nonexistent"}
    if pidns:
        env["CODEGRPO_SANDBOX_PIDNS"] = "1"
    return env


class _JobLost(SandboxError):
    """A working sandbox lost its supervisor during one job on every attempt (the job killed it, or wrote
    into its reply pipe): that job scores 0, the others go on."""


class _Supervisor:
    """One supervisor process; it runs jobs one at a time (fork server) or exactly one (fresh)."""

    def __init__(self, info: SandboxInfo, oneshot: bool):
        self.info = info
        self.oneshot = oneshot
        self.proc: subprocess.Popen | None = None
        self.workspace: str | None = None
        self.lock = threading.Lock()
        self._buf = b""
        self._stderr = None  # the supervisor's stderr (a host temporary file)

    def command(self, workspace: str) -> list[str]:
        """The supervisor's command line; refuses (SandboxError naming the path) what the sandbox cannot reach."""
        interp = bwrap.interpreter()
        files = {"Python interpreter": interp, **bwrap.SUPERVISOR_FILES}
        py = [interp, "-I", bwrap.SUPERVISOR_FILES["sandbox supervisor"], "--oneshot" if self.oneshot else "--serve",
              workspace]
        if self.info.mechanism != "bwrap":
            for what, path in files.items():
                if not os.path.exists(path):
                    raise SandboxError(f"{what} {path} does not exist")
            return py
        plan = bwrap.plan_mounts()
        bwrap.check_reachable(plan, files)
        return bwrap.bwrap_argv(workspace, plan) + ["--"] + py

    def start(self) -> None:
        base = os.environ.get("CODEGRPO_SANDBOX_DIR") or None
        if base:
            os.makedirs(base, exist_ok=True)
        self.workspace = tempfile.mkdtemp(prefix="codegrpo-sbx-", dir=base)
        os.chmod(self.workspace, 0o711)
        try:
            argv = self.command(self.workspace)
        except BaseException:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None
            raise
        self._stderr = tempfile.TemporaryFile(prefix="codegrpo-sbx-stderr-")
        env = _supervisor_env(bwrap.interpreter(), self.info.mechanism == "bwrap", self.info.private_uid)
        self.proc = popen_group(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env,
                                cwd=self.workspace, close_fds=True)
        self._buf = b""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _died(self, what: str) -> SandboxError:
        """The error for a supervisor that is gone: ``what``, its exit status and the end of its stderr."""
        proc = self.proc
        status = None
        if proc is not None:
            try:
                status = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        tail = ""
        if self._stderr is not None:
            try:
                self._stderr.seek(0, os.SEEK_END)
                size = self._stderr.tell()
                self._stderr.seek(max(0, size - _STDERR_TAIL))
                tail = self._stderr.read().decode("utf-8", "replace").strip()
            except (OSError, ValueError):
                pass
        self.close()
        msg = what + (f" (exit status {status})" if status is not None else "")
        return SandboxError(msg + (f": {tail}" if tail else ": it wrote nothing on stderr"))

    def request(self, req: dict, timeout_s: float) -> dict:
        """Send one job; its reply must carry the request's random id (else the supervisor is dropped: a job
        sharing its uid may have written into its pipe, and every later reply could be shifted)."""
        if not self.alive():
            self.start()
        rid = os.urandom(16).hex()
        req = dict(req, rid=rid)
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise self._died(f"sandbox supervisor died before the job ({exc})") from exc
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
                    raise self._died("sandbox supervisor exited without an answer")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        if self.oneshot:
            self.close()
        try:
            resp = json.loads(line)
        except ValueError:
            resp = None
        if not isinstance(resp, dict) or resp.get("rid") != rid or self._buf:
            self.close()
            raise SandboxError("sandbox supervisor answered with another request's id (or garbage); restarted")
        return resp

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                if proc.stdin:
                    proc.stdin.close()
            except OSError:
                pass
            stop_group(proc, grace_s=5.0, term=None)  # EOF on stdin asks it to finish
            if proc.stdout:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
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
        self._answered = False  # some supervisor of this pool has answered a job

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

    RETRIES = 2  # a job is sent again (on a restarted supervisor) at most this many times

    def _submit(self, req: dict, budget_s: float) -> dict:
        if self._closed:
            raise SandboxError("sandbox is closed")
        sup = self._acquire()
        try:
            with sup.lock:
                for attempt in range(self.RETRIES + 1):
                    try:
                        resp = sup.request(req, budget_s + 30.0)
                        self._answered = True
                        return resp
                    except SandboxError as exc:
                        # Retry on a fresh supervisor: it died (memory pressure on the host, or a job that shares
                        # its uid killed it) or its reply carried another request's id.
                        sup.close()
                        if attempt == self.RETRIES:
                            if self._answered:  # the sandbox works: this job took its supervisor down each time
                                raise _JobLost(str(exc)) from exc
                            raise
                raise AssertionError("unreachable")
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
        canary = "test_cg_canary_" + os.urandom(8).hex()
        files = {"solution.py": _b64(solution_code),
                 "test_solution.py": _b64(kodcode_test_file(test_code) + canary_test(canary))}
        req = {"steps": [{"kind": "pytest", "limits": dataclasses.asdict(lim)}], "files": files, "collect": []}
        t0 = time.monotonic()
        try:
            resp = self._submit(req, lim.wall_s)
        except _JobLost as exc:  # the sample scores 0; the batch goes on
            return PytestResult(executed=False, passed=0, total=max(count_test_functions(test_code), 1),
                                timed_out=False, error=f"harness guard fired: supervisor_lost ({exc})",
                                duration_s=time.monotonic() - t0, mechanism=self.mechanism, hack="supervisor_lost")
        step = resp["steps"][0]
        return _pytest_result(step, test_code, time.monotonic() - t0, self.mechanism, canary)

    def run_tests_many(self, items: Sequence[tuple[str, str]], timeout_s: float | None = None,
                       limits: SandboxLimits | None = None) -> list[PytestResult]:
        """Run many (solution, tests) pairs on the pool's supervisors in parallel; results in input order."""
        from concurrent.futures import ThreadPoolExecutor

        if len(self._sups) == 1 or len(items) <= 1:
            return [self.run_tests(s, t, timeout_s, limits) for s, t in items]
        with ThreadPoolExecutor(max_workers=len(self._sups)) as ex:
            return list(ex.map(lambda st: self.run_tests(st[0], st[1], timeout_s, limits), items))

    def run_python(self, script: str, files: Mapping[str, str | bytes] | None = None, args: Sequence[str] = (),
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
        step = {"kind": "exec", "argv": [bwrap.interpreter(), "main.py", *map(str, args)],
                "limits": dataclasses.asdict(lim), "stdin": _b64(stdin) if stdin is not None else None}
        resp = self._submit({"steps": [step], "files": payload, "collect": list(collect)}, lim.wall_s)
        got = {k: base64.b64decode(v) for k, v in (resp.get("collected") or {}).items()}
        return _exec_result(resp["steps"][0], self.mechanism), got

    def run_suite(self, driver: str, mode: str, runner_files: Mapping[str, str | bytes],
                  cand_files: Mapping[str, str | bytes], timeout_s: float | None = None,
                  limits: SandboxLimits | None = None) -> tuple[ExecResult, dict]:
        """An evaluation-suite job in two processes (docs/sandbox.md, *Evaluation harnesses*): the candidate
        imports ``cand_files["solution.py"]`` and serves requests; the trusted runner runs ``driver`` (source text
        of :mod:`codegrpo.eval.suite_driver`) in mode ``mode`` with ``runner_files`` in a directory only it can
        read, and writes the verdict to a descriptor only it holds. Returns the runner's :class:`ExecResult` and
        its parsed report (``verdict``, ``done``, ``protocol_errors``, ``bad_lines`` ...)."""
        lim = (limits or self.limits).with_timeout(timeout_s)
        files = {}
        for side, group in (("tests", runner_files), ("cand", cand_files)):
            for name, data in group.items():
                files[f"{side}/{name}"] = (base64.b64encode(data).decode() if isinstance(data, bytes)
                                           else _b64(data))
        step = {"kind": "suite", "mode": mode, "driver": _b64(driver), "limits": dataclasses.asdict(lim)}
        try:
            resp = self._submit({"steps": [step], "files": files, "collect": []}, lim.wall_s)
        except _JobLost as exc:  # the job took its supervisor down on every attempt: it fails, the batch goes on
            return (ExecResult(returncode=None, signal=None, timed_out=False, stdout="", stderr=str(exc)[-2000:],
                               duration_s=0.0, mechanism=self.mechanism), {"supervisor_lost": str(exc)})
        st = resp["steps"][0]
        res = _exec_result(st, self.mechanism)
        rep = dict(st.get("report") or {})
        if st.get("returncode") == WRITE_FAILED:
            rep["write_failed"] = True
        return res, rep

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


def canary_test(name: str) -> str:
    """A test appended to the runner's copy of the test file that must fail: it compares what the solution
    exports with a fresh object. It passes only if the runner's comparisons or its reporting were subverted.
    It fails through ``pytest.fail(pytrace=False)``: no traceback to format, so it costs next to nothing."""
    return (f"\n\ndef {name}():\n"
            "    import pytest as _cg_pytest\n"
            "    import solution as _cg_m\n"
            "    class _CgNothing:\n"
            "        pass\n"
            "    _cg_x = _CgNothing()\n"
            "    if not any(getattr(_cg_m, _n, None) == _cg_x for _n in list(_cg_m.__all__)[:8]):\n"
            "        _cg_pytest.fail('canary', pytrace=False)\n")


def test_function_names(test_code: str) -> tuple[set[str], set[str]]:
    """(test function names the file may yield, those pytest must collect). Required: ``test*`` functions at
    top level and ``test*`` methods of top-level ``Test*`` classes (a class with ``__init__`` is not collected by
    pytest, so its methods are not required). Allowed: those, plus ``test*`` functions defined anywhere in the
    file and ``test*`` names it assigns. Empty sets when the file does not parse."""
    try:
        tree = parse_python(test_code)
    except SyntaxError:
        return set(), set()
    allowed, required = set(), set()
    for node in ast.walk(tree):  # defined anywhere (under an ``if``, a ``try``) or bound by assignment
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            allowed.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id.startswith("test"):
            allowed.add(node.id)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            allowed.add(node.name)
            required.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            body = [b for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
            has_init = any(b.name == "__init__" for b in body)
            for b in body:
                if b.name.startswith("test"):
                    allowed.add(b.name)
                    if not has_init:
                        required.add(b.name)
    return allowed, required


def count_test_functions(test_code: str) -> int:
    """Test functions pytest would collect from a file by name (``test_*`` functions, methods of ``Test*``)."""
    try:
        tree = parse_python(test_code)
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


def _pytest_result(step: dict, test_code: str, dt: float, mech: str, canary: str | None = None) -> PytestResult:
    """The verdict from the trusted runner's report, checked against the test file as written (guards)."""
    rep = step.get("report") or {}
    timed_out = bool(step.get("timed_out"))
    collected = rep.get("collected")
    collection_error = bool(rep.get("collect_error"))
    hello = rep.get("hello") is True
    executed = hello and (rep.get("alive") is True or (timed_out and "alive" not in rep))
    allowed, required = test_function_names(test_code)
    hack = None
    items: dict[str, str] = {}
    if isinstance(collected, list):
        for it in collected:
            if isinstance(it, list) and len(it) == 2:
                items[str(it[0])] = str(it[1])
    test_items = {nid: fn for nid, fn in items.items() if fn != canary}
    outcomes: dict[str, bool] = {}
    for nodeid, ok in rep.get("tests", []):
        outcomes[nodeid] = outcomes.get(nodeid, True) and bool(ok)
    if step.get("returncode") == WRITE_FAILED:
        hack = "report_write_error"
    elif isinstance(rep.get("protocol_errors"), int) and rep["protocol_errors"] > 0:
        hack = "protocol_violation"  # the solution's side wrote what its boundary code never sends
    elif rep.get("bad_lines"):
        hack = "truncated_report"
    elif hello and not collection_error and isinstance(collected, list):
        names = set(test_items.values())
        if names - allowed:
            hack = "extra_test_ids"
        elif required - names:
            hack = "missing_test_ids"
        elif set(outcomes) - set(items):
            hack = "unknown_test_ids"
        elif canary is not None and canary in items.values() and not timed_out:
            canary_ids = [nid for nid, fn in items.items() if fn == canary]
            if any(outcomes.get(nid, False) for nid in canary_ids) or not all(nid in outcomes for nid in canary_ids):
                hack = "canary"
        elif canary is not None and not timed_out:
            hack = "canary"
        if hack is None and not timed_out and rep.get("done") is not True:
            hack = "truncated_report"
    passed = sum(1 for nid, ok in outcomes.items() if ok and nid in test_items)
    if collection_error or not hello or hack is not None:
        passed = 0
    if hack is not None:
        executed = False
    total = len(test_items) if (test_items and not collection_error) else max(count_test_functions(test_code), 1)
    counted = not (collection_error or not hello or hack is not None)
    per_test = tuple((nid, bool(counted and outcomes.get(nid, False))) for nid in test_items) \
        if not collection_error else ()
    err = rep.get("import_error") if isinstance(rep.get("import_error"), str) else step.get("error")
    if hack is not None:
        err = f"harness guard fired: {hack}" + (f" ({err})" if err else "")
    return PytestResult(executed=executed, passed=passed, total=total, timed_out=timed_out,
                        collection_error=collection_error, error=err,
                        stdout=step.get("stdout", ""), stderr=step.get("stderr", ""), duration_s=dt, mechanism=mech,
                        returncode=step.get("returncode"), signal=step.get("signal"), hack=hack,
                        outcomes=per_test)


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


SANDBOX_ENV_LIMITS = "CODEGRPO_SANDBOX_LIMITS"
SANDBOX_ENV_WORKERS = "CODEGRPO_SANDBOX_WORKERS"


def default_sandbox_settings(environ: Mapping[str, str] | None = None) -> dict:
    """The settings of :func:`default_sandbox` (a ``sandbox`` config section): the training run's ``sandbox``
    section (:func:`codegrpo.runsettings.run_section`) > ``CODEGRPO_SANDBOX_LIMITS`` (a JSON object of limits) and
    ``CODEGRPO_SANDBOX_WORKERS`` > the schema's defaults. ``workers`` None = min(4, cores)."""
    from codegrpo import runsettings

    env = os.environ if environ is None else environ
    out = runsettings.schema_defaults("sandbox")
    raw = env.get(SANDBOX_ENV_LIMITS)
    if raw:
        try:
            limits = json.loads(raw)
        except ValueError as exc:
            raise SandboxError(f"${SANDBOX_ENV_LIMITS}: not JSON ({exc})") from None
        if not isinstance(limits, dict):
            raise SandboxError(f"${SANDBOX_ENV_LIMITS}: expected a JSON object of limits, got {raw!r}")
        out.update(limits)
    if env.get(SANDBOX_ENV_WORKERS):
        try:
            out["workers"] = int(env[SANDBOX_ENV_WORKERS]) or None
        except ValueError:
            raise SandboxError(f"${SANDBOX_ENV_WORKERS}={env[SANDBOX_ENV_WORKERS]!r}: expected an integer") from None
    path = runsettings.settings_path(env)
    if path:
        out.update(runsettings.run_section("sandbox", path))
    return out


def default_sandbox() -> Sandbox:
    """The process-wide sandbox (fork-server mode), created on first use and closed at exit, configured by
    :func:`default_sandbox_settings` (inside a training run: the run's settings.json)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT._closed:
            sb = default_sandbox_settings()
            _DEFAULT = make_sandbox(sb.get("workers") or min(4, os.cpu_count() or 1), sb)
            import atexit

            atexit.register(_DEFAULT.close)
        return _DEFAULT


def require_isolation(section: Mapping | None) -> None:
    """With ``sandbox.require_namespaces``, refuse to run model-written code without bwrap's namespaces."""
    if not (section or {}).get("require_namespaces"):
        return
    info = bwrap.sandbox_info()
    if info.mechanism != "bwrap":
        raise SandboxError(f"sandbox.require_namespaces is true, but this machine's sandbox would run with "
                           f"{info.mechanism} only ({info.reason}); install bubblewrap (Debian/Ubuntu: apt-get install "
                           f"bubblewrap) and allow unprivileged user namespaces, or set sandbox.require_namespaces: "
                           f"false to accept resource limits only")


def make_sandbox(workers: int = 1, limits: Mapping | None = None) -> Sandbox:
    """The one way to build a sandbox from config: a fork-server pool of ``workers`` supervisors with the
    ``sandbox`` config section's limits (unknown keys, such as ``workers``, are ignored); refused without
    namespaces when the section has ``require_namespaces`` (:func:`require_isolation`)."""
    require_isolation(limits)
    return Sandbox(SandboxLimits.from_config(dict(limits or {})), mode="server", workers=max(1, int(workers)))


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

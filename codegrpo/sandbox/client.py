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

One supervisor process (start, request, stop; the error of one that died carries the end of its stderr, e.g.
``bwrap: execvp ...: No such file or directory``) is :mod:`codegrpo.sandbox.launcher`; the runner's copy of the
test file and the verdict checked against the file as written are :mod:`codegrpo.sandbox.verdict`.

Standard library (and :mod:`codegrpo.procgroup`) only.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.sandbox import bwrap
from codegrpo.sandbox.bwrap import sandbox_info
from codegrpo.sandbox.launcher import JobLost, SupervisorProcess
from codegrpo.sandbox.types import CompileResult, ExecResult, PytestResult, SandboxError, SandboxLimits
from codegrpo.sandbox.verdict import WRITE_FAILED, canary_test, count_test_functions, exec_result, kodcode_test_file
from codegrpo.sandbox.verdict import pytest_result
from codegrpo.sandbox.verdict import test_function_names as test_function_names  # importable from here as before

__all__ = [
    "Sandbox",
    "make_sandbox",
    "default_sandbox",
    "run_tests",
    "run_binary",
    "compile_c",
    "kodcode_test_file",
    "count_test_functions",
]


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
        self._sups = [SupervisorProcess(self.info, oneshot=(mode == "fresh")) for _ in range(max(1, int(workers)))]
        self._free = list(self._sups)
        self._cv = threading.Condition()
        self._closed = False
        self._answered = False  # some supervisor of this pool has answered a job

    @property
    def mechanism(self) -> str:
        return f"{self.info.mechanism}{'+uid' if self.info.private_uid else ''}/{self.mode}"

    # -- pool --------------------------------------------------------------------------------------------
    def _acquire(self) -> SupervisorProcess:
        with self._cv:
            while not self._free:
                self._cv.wait()
            return self._free.pop()

    def _release(self, sup: SupervisorProcess) -> None:
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
                                raise JobLost(str(exc)) from exc
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
    def run_tests(
        self, solution_code: str, test_code: str, timeout_s: float | None = None, limits: SandboxLimits | None = None
    ) -> PytestResult:
        """KodCode's harness: ``solution.py`` + ``test_solution.py`` (``from solution import *`` + tests), pytest."""
        lim = (limits or self.limits).with_timeout(timeout_s)
        canary = "test_cg_canary_" + os.urandom(8).hex()
        files = {
            "solution.py": _b64(solution_code),
            "test_solution.py": _b64(kodcode_test_file(test_code) + canary_test(canary)),
        }
        req = {"steps": [{"kind": "pytest", "limits": dataclasses.asdict(lim)}], "files": files, "collect": []}
        t0 = time.monotonic()
        try:
            resp = self._submit(req, lim.wall_s)
        except JobLost as exc:  # the sample scores 0; the batch goes on
            return PytestResult(
                executed=False,
                passed=0,
                total=max(count_test_functions(test_code), 1),
                timed_out=False,
                error=f"harness guard fired: supervisor_lost ({exc})",
                duration_s=time.monotonic() - t0,
                mechanism=self.mechanism,
                hack="supervisor_lost",
            )
        step = resp["steps"][0]
        return pytest_result(step, test_code, time.monotonic() - t0, self.mechanism, canary)

    def run_tests_many(
        self, items: Sequence[tuple[str, str]], timeout_s: float | None = None, limits: SandboxLimits | None = None
    ) -> list[PytestResult]:
        """Run many (solution, tests) pairs on the pool's supervisors in parallel; results in input order."""
        from concurrent.futures import ThreadPoolExecutor

        if len(self._sups) == 1 or len(items) <= 1:
            return [self.run_tests(s, t, timeout_s, limits) for s, t in items]
        with ThreadPoolExecutor(max_workers=len(self._sups)) as ex:
            return list(ex.map(lambda st: self.run_tests(st[0], st[1], timeout_s, limits), items))

    def run_python(
        self,
        script: str,
        files: Mapping[str, str | bytes] | None = None,
        args: Sequence[str] = (),
        stdin: str | None = None,
        timeout_s: float | None = None,
        limits: SandboxLimits | None = None,
        collect: Sequence[str] = (),
    ) -> tuple[ExecResult, dict[str, bytes]]:
        """Run ``python main.py ARGS`` (``script`` as ``main.py``) in a job directory holding ``files``.

        The same isolation and limits as every other job; the interpreter is this process's. Returns the run's
        :class:`ExecResult` and the bytes of each file named in ``collect`` that the job left in its directory
        (untrusted: the job may have written anything there).
        """
        lim = (limits or self.limits).with_timeout(timeout_s)
        payload = {"main.py": _b64(script)}
        for name, data in (files or {}).items():
            payload[name] = base64.b64encode(data).decode() if isinstance(data, bytes) else _b64(data)
        step = {
            "kind": "exec",
            "argv": [bwrap.interpreter(), "main.py", *map(str, args)],
            "limits": dataclasses.asdict(lim),
            "stdin": _b64(stdin) if stdin is not None else None,
        }
        resp = self._submit({"steps": [step], "files": payload, "collect": list(collect)}, lim.wall_s)
        got = {k: base64.b64decode(v) for k, v in (resp.get("collected") or {}).items()}
        return exec_result(resp["steps"][0], self.mechanism), got

    def run_suite(
        self,
        driver: str,
        mode: str,
        runner_files: Mapping[str, str | bytes],
        cand_files: Mapping[str, str | bytes],
        timeout_s: float | None = None,
        limits: SandboxLimits | None = None,
    ) -> tuple[ExecResult, dict]:
        """An evaluation-suite job in two processes (docs/sandbox.md, *Evaluation harnesses*): the candidate
        imports ``cand_files["solution.py"]`` and serves requests; the trusted runner runs ``driver`` (source text
        of :mod:`codegrpo.eval.suite_driver`) in mode ``mode`` with ``runner_files`` in a directory only it can
        read, and writes the verdict to a descriptor only it holds. Returns the runner's :class:`ExecResult` and
        its parsed report (``verdict``, ``done``, ``protocol_errors``, ``bad_lines`` ...)."""
        lim = (limits or self.limits).with_timeout(timeout_s)
        files = {}
        for side, group in (("tests", runner_files), ("cand", cand_files)):
            for name, data in group.items():
                files[f"{side}/{name}"] = base64.b64encode(data).decode() if isinstance(data, bytes) else _b64(data)
        step = {"kind": "suite", "mode": mode, "driver": _b64(driver), "limits": dataclasses.asdict(lim)}
        try:
            resp = self._submit({"steps": [step], "files": files, "collect": []}, lim.wall_s)
        except JobLost as exc:  # the job took its supervisor down on every attempt: it fails, the batch goes on
            return (
                ExecResult(
                    returncode=None,
                    signal=None,
                    timed_out=False,
                    stdout="",
                    stderr=str(exc)[-2000:],
                    duration_s=0.0,
                    mechanism=self.mechanism,
                ),
                {"supervisor_lost": str(exc)},
            )
        st = resp["steps"][0]
        res = exec_result(st, self.mechanism)
        rep = dict(st.get("report") or {})
        if st.get("returncode") == WRITE_FAILED:
            rep["write_failed"] = True
        return res, rep

    def compile_c(
        self,
        source: str | os.PathLike,
        timeout_s: float | None = None,
        flags: Sequence[str] = ("-O0",),
        libs: Sequence[str] = ("-lm",),
        limits: SandboxLimits | None = None,
    ) -> CompileResult:
        """Compile C with ``gcc <flags> prog.c -o prog <libs>`` inside the sandbox; returns the binary bytes."""
        src = _read_source(source)
        lim = (limits or self.limits).with_timeout(timeout_s)
        argv = ["gcc", *flags, "prog.c", "-o", "prog", *libs]
        req = {
            "steps": [{"kind": "exec", "argv": argv, "limits": dataclasses.asdict(lim)}],
            "files": {"prog.c": _b64(src)},
            "collect": ["prog"],
        }
        resp = self._submit(req, lim.wall_s)
        res = exec_result(resp["steps"][0], self.mechanism)
        binary = base64.b64decode(resp["collected"]["prog"]) if resp.get("collected", {}).get("prog") else None
        return CompileResult(ok=res.ok and binary is not None, binary=binary, result=res, command=argv)

    def run_binary(
        self,
        program: str | bytes | os.PathLike,
        args: Sequence[str] = (),
        timeout_s: float | None = None,
        stdin: str | None = None,
        compile_timeout_s: float | None = None,
        limits: SandboxLimits | None = None,
        flags: Sequence[str] = ("-O0",),
        libs: Sequence[str] = ("-lm",),
    ) -> ExecResult:
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
        elif isinstance(program, os.PathLike) or (
            isinstance(program, str) and "\n" not in program and os.path.isfile(program)
        ):
            path = Path(program)
            data = path.read_bytes()
            if path.suffix == ".c":
                files["prog.c"] = base64.b64encode(data).decode()
            else:
                files["prog"] = base64.b64encode(data).decode()
        else:
            files["prog.c"] = _b64(str(program))
        if "prog.c" in files:
            steps.append(
                {
                    "kind": "exec",
                    "argv": ["gcc", *flags, "prog.c", "-o", "prog", *libs],
                    "limits": dataclasses.asdict(clim),
                }
            )
        steps.append(
            {
                "kind": "exec",
                "argv": ["./prog", *map(str, args)],
                "limits": dataclasses.asdict(lim),
                "stdin": _b64(stdin) if stdin is not None else None,
                "mode": 0o755,
            }
        )
        resp = self._submit({"steps": steps, "files": files, "collect": []}, lim.wall_s + clim.wall_s)
        return exec_result(resp["steps"][-1], self.mechanism)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()


def _read_source(source: str | os.PathLike) -> str:
    if isinstance(source, os.PathLike) or ("\n" not in str(source) and os.path.isfile(str(source))):
        return Path(source).read_text(encoding="utf-8", errors="replace")
    return str(source)


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
        raise SandboxError(
            f"sandbox.require_namespaces is true, but this machine's sandbox would run with "
            f"{info.mechanism} only ({info.reason}); install bubblewrap (Debian/Ubuntu: apt-get install "
            f"bubblewrap) and allow unprivileged user namespaces, or set sandbox.require_namespaces: "
            f"false to accept resource limits only"
        )


def make_sandbox(workers: int = 1, limits: Mapping | None = None) -> Sandbox:
    """The one way to build a sandbox from config: a fork-server pool of ``workers`` supervisors with the
    ``sandbox`` config section's limits (unknown keys, such as ``workers``, are ignored); refused without
    namespaces when the section has ``require_namespaces`` (:func:`require_isolation`)."""
    require_isolation(limits)
    return Sandbox(SandboxLimits.from_config(dict(limits or {})), mode="server", workers=max(1, int(workers)))


def run_tests(
    solution_code: str,
    test_code: str,
    timeout_s: float | None = None,
    limits: SandboxLimits | None = None,
    sandbox: Sandbox | None = None,
) -> PytestResult:
    """Run KodCode-style tests (``test_solution.py`` importing ``solution``) on a solution, sandboxed."""
    return (sandbox or default_sandbox()).run_tests(solution_code, test_code, timeout_s, limits)


def run_binary(
    program: str | bytes | os.PathLike, args: Sequence[str] = (), *, sandbox: Sandbox | None = None, **kw: Any
) -> ExecResult:
    """Compile (if given C source or a ``.c`` path) and run a C program sandboxed; pass iff ``.ok``. ``kw``: the
    keywords of :meth:`Sandbox.run_binary` (timeout_s, stdin, limits, flags, ...)."""
    return (sandbox or default_sandbox()).run_binary(program, args, **kw)


def compile_c(
    source: str | os.PathLike,
    out_path: str | os.PathLike | None = None,
    timeout_s: float | None = None,
    sandbox: Sandbox | None = None,
    **kw: Any,
) -> CompileResult:
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

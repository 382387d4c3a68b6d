"""Batch gcc engine for the SK²Decompile compile rewards.

The reference compile check (``sk2decompile.md`` §2.1) writes ``f"{header}\\n\\n{solution}"`` to ``temp.c`` in a
fresh temporary directory and runs ``gcc -c temp.c -o temp.o`` (5 s timeout); exit status 0 → 1.0, anything
else (error, timeout, missing gcc, text that cannot be encoded) → 0.0.

:class:`CompileEngine` gives the same outcomes for a whole GRPO batch, faster:

* **dedupe** — identical source texts in a batch are compiled once;
* **cache** — an LRU cache keyed by the source text (header + solution) survives across steps;
* **parallel** — unique sources are compiled concurrently by a pool of threads, each driving its own gcc process
  (the compiler runs in child processes, so the pool spreads over all cores without pickling anything);
* **RAM scratch** — each worker reuses one directory under ``/dev/shm`` (falls back to the temp dir), and gcc's
  own intermediates go to a per-worker ``TMPDIR`` there (emptied after a killed compile);
* **limits** — every gcc process runs under ``prlimit`` with a 1 GiB address-space and 256 MiB file-size limit
  (the reference has none; ordinary compiles need well under 100 MB, so only sources that would exhaust memory
  or time out anyway are affected);
* **mode** ``"fast"`` (default) — ``gcc -fsyntax-only temp.c`` first (run as the ``cc1`` command the driver
  would run, see :func:`syntax_command`). A syntax failure is a ``-c`` failure, so it
  scores 0.0 at once. A syntax success is confirmed with the exact ``gcc -c`` run whenever the text contains a
  construct that can fail only after parsing (inline ``asm``/asm labels, ``__attribute__`` such as
  ``alias``/``section``/``always_inline``/``error``, ``__builtin_*``, pragmas, ``[[...]]`` attributes,
  ``#include``, non-ASCII or universal character names), or may define a file-scope object of void type
  (:func:`codegrpo.rewards.c_syntax.may_define_void_object`: ``void v;`` passes the syntax check but not ``gcc -c``), or when the syntax
  check itself took more than ``confirm_after_s`` seconds (so the 5 s limit decides the same way). ``tests/rewards/test_compile.py`` checks
  that both modes agree on the shipped data and on a mutation corpus. Mode ``"exact"`` always runs the
  reference command.

The engine is thread-safe; :func:`default_engine` returns one per process, configured by :func:`engine_settings`:
inside a training run from the run's ``settings.json`` (section ``compile_reward``), otherwise from the
documented overrides ``CODEGRPO_COMPILE_MODE``, ``_WORKERS``, ``_CACHE_SIZE``, ``_MEMORY_MB``, ``_SCRATCH`` and
the schema's defaults. ``CODEGRPO_GCC`` names the compiler (default ``gcc``).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Sequence

from codegrpo.procgroup import run_group
from codegrpo.rewards.c_syntax import may_define_void_object

log = logging.getLogger(__name__)

GCC = os.environ.get("CODEGRPO_GCC", "gcc")
TIMEOUT_S = 5.0  # reference: subprocess.run(..., timeout=5)
MODES = ("exact", "fast")

# Constructs that parse fine but can still make `gcc -c` fail in the middle/back end or in the assembler
# (checked on gcc 12: asm text and duplicate asm labels, alias/section/always_inline/error attributes, ...).
# Deliberately broad: a false positive only costs one extra exact compile.
_CONFIRM_RE = re.compile(rb"asm|attribute|__builtin|pragma|Pragma|\[\[|include|declspec|[\x80-\xff]|\\u|\\U")


def render_source(header, solution) -> str:
    """The reference file content: ``f"{header}\\n\\n{solution}"`` (a None header becomes the text ``None``)."""
    return f"{header}\n\n{solution}"


def limit_prefix(memory_mb: int | None, fsize_mb: int | None) -> list[str]:
    """``prlimit --as=… --fsize=… --`` (util-linux) so every gcc process gets an address-space and file-size limit
    (a source that includes /dev/zero or a huge file cannot take the node's memory); [] when no limit is asked
    for or ``prlimit`` is missing (then the limits are not enforced; logged once)."""
    opts = []
    if memory_mb:
        opts.append(f"--as={int(memory_mb) << 20}")
    if fsize_mb:
        opts.append(f"--fsize={int(fsize_mb) << 20}")
    if not opts:
        return []
    exe = shutil.which("prlimit")
    if exe is None:
        if not _WARNED.get("prlimit"):
            _WARNED["prlimit"] = True
            log.warning("prlimit (util-linux) not found: gcc runs without memory/file-size limits")
        return []
    return [exe, *opts, "--"]


_WARNED: dict[str, bool] = {}


def gcc_major() -> int | None:
    try:
        out = subprocess.run([GCC, "-dumpversion"], capture_output=True, text=True, timeout=10).stdout.strip()
        return int(out.split(".")[0])
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


class CompilerUnavailableError(RuntimeError):
    """gcc cannot be run: every sample would score 0 and silently become the training signal."""


def check_compiler(env: dict | None = None, cwd: str | None = None) -> None:
    """Raise :class:`CompilerUnavailableError` unless ``$CODEGRPO_GCC`` (default ``gcc``) compiles a trivial unit.

    The reference scores a missing compiler as 0.0 per sample; the engine refuses to start instead, so a broken
    environment fails the training job at once with a message naming the command.
    """
    with tempfile.TemporaryDirectory(dir=cwd) as d:
        with open(os.path.join(d, "ok.c"), "w") as fh:
            fh.write("int codegrpo_ok(void) { return 0; }\n")
        argv = [GCC, "-c", "ok.c", "-o", "ok.o"]
        try:
            proc = subprocess.run(argv, cwd=d, env=env, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            raise CompilerUnavailableError(
                f"cannot run the C compiler {GCC!r} ({type(exc).__name__}: {exc}); install gcc or set CODEGRPO_GCC"
            ) from exc
        if proc.returncode != 0:
            raise CompilerUnavailableError(
                f"the C compiler {' '.join(argv)!r} failed on a trivial file (exit {proc.returncode}): "
                f"{proc.stderr.strip()[-500:]}"
            )


def _run(argv: list[str], cwd: str, env: dict, timeout: float) -> int | None:
    """Run one gcc command in its own process group; return its exit status, or None on timeout/start failure.

    On a timeout the whole group (gcc's children ``cc1``, ``as`` too) is killed."""
    try:
        res = run_group(argv, timeout=timeout, cwd=cwd, env=env, capture=False)
    except OSError:
        return None
    return None if res.timed_out else res.returncode


def compile_reference(header, solution, timeout: float = TIMEOUT_S) -> float:
    """The reference procedure, literally: fresh temp dir, ``temp.c``, ``gcc -c temp.c -o temp.o``; 1.0 or 0.0.

    Used as the baseline in benchmarks and as the ground truth in tests.
    """
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "temp.c")
            with open(path, "w") as fh:
                fh.write(f"{header}\n\n{solution}")
            subprocess.run(
                [GCC, "-c", path, "-o", os.path.join(tmp, "temp.o")],
                check=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=timeout,
            )
        return 1.0
    except Exception:
        return 0.0


def syntax_command(cwd: str, env: dict | None = None) -> list[str]:
    """The command ``gcc -fsyntax-only temp.c`` runs: the driver's single ``cc1`` invocation (read from
    ``gcc -###``), which saves the driver's own start-up; falls back to the driver command if that fails."""
    driver = [GCC, "-fsyntax-only", "temp.c"]
    try:
        out = subprocess.run(
            [GCC, "-###", "-fsyntax-only", "temp.c"], cwd=cwd, env=env, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return driver
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith(" ")]
    if out.returncode != 0 or len(lines) != 1:
        return driver
    argv = shlex.split(lines[0])
    if (
        not argv
        or not os.path.basename(argv[0]).startswith("cc1")
        or "temp.c" not in argv
        or "-fsyntax-only" not in argv
        or not os.access(argv[0], os.X_OK)
    ):
        return driver
    return argv


@dataclass
class EngineStats:
    requested: int = 0
    cache_hits: int = 0
    batch_duplicates: int = 0
    compiled: int = 0
    syntax_runs: int = 0
    exact_runs: int = 0
    timeouts: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class CompileEngine:
    """Compile many (header, solution) pairs with reference outcomes; see the module docstring."""

    def __init__(
        self,
        workers: int | None = None,
        mode: str = "fast",
        cache_size: int = 65536,
        scratch: str | None = None,
        timeout: float = TIMEOUT_S,
        confirm_after_s: float = 1.0,
        memory_mb: int | None = 1024,
        fsize_mb: int | None = 256,
    ):
        if mode not in MODES:
            raise ValueError(f"compile mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        # threads mostly wait on gcc: two per core overlap their Python work with the compiles
        self.workers = max(1, int(workers or 2 * (os.cpu_count() or 1)))
        self.cache_size = max(0, int(cache_size))
        self.timeout = float(timeout)
        self.confirm_after_s = float(confirm_after_s)
        self._limits = limit_prefix(memory_mb, fsize_mb)
        base = scratch or ("/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None)
        self._scratch_root = tempfile.mkdtemp(prefix="codegrpo-cc-", dir=base)
        self._env = dict(os.environ, TMPDIR=self._scratch_root)  # locale inherited, as in the reference
        try:
            check_compiler(self._env, self._scratch_root)
        except CompilerUnavailableError:
            shutil.rmtree(self._scratch_root, ignore_errors=True)
            raise
        self._cache: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="codegrpo-cc")
        self._local = threading.local()
        self.stats = EngineStats()
        self.syntax_argv = syntax_command(self._scratch_root, self._env) if mode == "fast" else None

    # -- lifecycle ------------------------------------------------------------------------------------
    def close(self) -> None:
        self._pool.shutdown(wait=True)
        shutil.rmtree(self._scratch_root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):  # best effort; close() is the real cleanup
        try:
            shutil.rmtree(self._scratch_root, ignore_errors=True)
        except Exception:
            pass

    # -- one compile ----------------------------------------------------------------------------------
    def _workdir(self) -> tuple[str, str, dict]:
        """This thread's work dir (temp.c, temp.o), its own TMPDIR for gcc's temporaries, and its environment."""
        w = getattr(self._local, "w", None)
        if w is None:
            d = tempfile.mkdtemp(prefix="w", dir=self._scratch_root)
            tmp = tempfile.mkdtemp(prefix="t", dir=self._scratch_root)
            w = (d, tmp, dict(self._env, TMPDIR=tmp))
            self._local.w = w
        return w

    def _gcc(self, argv: list[str], d: str, tmp: str, env: dict) -> int | None:
        rc = _run(self._limits + argv, d, env, self.timeout)
        if rc is None:  # killed: the driver could not remove its temporaries (cc*.s)
            self.stats.timeouts += 1
            for name in os.listdir(tmp):
                path = os.path.join(tmp, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
        return rc

    def _compile_bytes(self, data: bytes) -> float:
        d, tmp, env = self._workdir()
        src, obj = os.path.join(d, "temp.c"), os.path.join(d, "temp.o")
        with open(src, "wb") as fh:
            fh.write(data)
        try:
            if self.mode == "fast":
                t0 = time.perf_counter()
                rc = self._gcc(self.syntax_argv, d, tmp, env)
                self.stats.syntax_runs += 1
                if rc != 0:
                    return 0.0
                if (
                    time.perf_counter() - t0 <= self.confirm_after_s
                    and not _CONFIRM_RE.search(data)
                    and not may_define_void_object(data)
                ):
                    return 1.0
            rc = self._gcc([GCC, "-c", "temp.c", "-o", "temp.o"], d, tmp, env)
            self.stats.exact_runs += 1
            return 1.0 if rc == 0 else 0.0
        finally:
            try:
                os.unlink(obj)
            except FileNotFoundError:
                pass

    # -- batches --------------------------------------------------------------------------------------
    def compile_sources(self, sources: Sequence[str]) -> list[float]:
        """Outcome (1.0/0.0) of compiling each full source text, in order."""
        n = len(sources)
        out: list[float | None] = [None] * n
        todo: dict[bytes, list[int]] = {}
        with self._lock:
            self.stats.requested += n
            for i, text in enumerate(sources):
                try:
                    data = text.encode("utf-8")  # the reference writes with the (UTF-8) locale encoding
                except (UnicodeEncodeError, AttributeError):
                    out[i] = 0.0  # e.g. a lone surrogate: the reference's write raises → 0.0
                    continue
                hit = self._cache.get(data)
                if hit is not None:
                    self._cache.move_to_end(data)
                    self.stats.cache_hits += 1
                    out[i] = hit
                elif data in todo:
                    self.stats.batch_duplicates += 1
                    todo[data].append(i)
                else:
                    todo[data] = [i]
        if todo:
            keys = list(todo)
            results = list(self._pool.map(self._compile_bytes, keys))
            with self._lock:
                self.stats.compiled += len(keys)
                for data, res in zip(keys, results):
                    for i in todo[data]:
                        out[i] = res
                    if self.cache_size:
                        self._cache[data] = res
                        self._cache.move_to_end(data)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return out  # type: ignore[return-value]

    def compile_pairs(self, headers: Iterable, solutions: Iterable) -> list[float]:
        """Reference compile outcome for each (header, solution) pair."""
        return self.compile_sources([render_source(h, s) for h, s in zip(headers, solutions)])

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()


_DEFAULT: CompileEngine | None = None
_DEFAULT_LOCK = threading.Lock()


#: documented environment overrides (outside a training run, below explicit arguments and run settings)
ENV_OVERRIDES = {
    "mode": "CODEGRPO_COMPILE_MODE",
    "workers": "CODEGRPO_COMPILE_WORKERS",
    "cache_size": "CODEGRPO_COMPILE_CACHE_SIZE",
    "memory_mb": "CODEGRPO_COMPILE_MEMORY_MB",
    "scratch": "CODEGRPO_COMPILE_SCRATCH",
}


def engine_settings(explicit: dict | None = None, environ=None) -> dict:
    """The compile engine's settings: ``explicit`` > the training run's ``compile_reward`` section
    (:func:`codegrpo.runsettings.run_section`) > ``CODEGRPO_COMPILE_*`` > the schema's defaults.

    ``workers`` None = two threads per core; ``memory_mb`` None or 0 = no address-space limit; ``scratch`` (not a
    config key) None = ``/dev/shm``, else the temp dir.
    """
    from codegrpo import runsettings

    env = os.environ if environ is None else environ
    out = {"scratch": None, **runsettings.schema_defaults("compile_reward")}
    for key, name in ENV_OVERRIDES.items():
        raw = env.get(name)
        if raw in (None, ""):
            continue
        if key in ("mode", "scratch"):
            out[key] = raw
        else:
            try:
                out[key] = int(raw)
            except ValueError:
                raise ValueError(f"${name}={raw!r}: expected an integer") from None
    path = runsettings.settings_path(env)
    out.update(runsettings.run_section("compile_reward", path) if path else {})
    out.update({k: v for k, v in (explicit or {}).items()})
    unknown = sorted(set(out) - set(ENV_OVERRIDES))
    if unknown:
        raise ValueError(f"unknown compile_reward setting(s) {unknown}; known: {', '.join(ENV_OVERRIDES)}")
    return out


def engine_from_settings(settings: dict) -> CompileEngine:
    """A :class:`CompileEngine` from resolved :func:`engine_settings`."""
    return CompileEngine(
        workers=settings.get("workers") or None,
        mode=settings["mode"],
        cache_size=int(settings["cache_size"]),
        scratch=settings.get("scratch") or None,
        memory_mb=int(settings.get("memory_mb") or 0) or None,
    )


def engine_from_env() -> CompileEngine:
    """The engine for this process's settings (run settings inside a training run; see :func:`engine_settings`)."""
    return engine_from_settings(engine_settings())


def default_engine() -> CompileEngine:
    """The per-process engine used by the reward scorers (created on first use from :func:`engine_settings`)."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = engine_from_env()
                atexit.register(_DEFAULT.close)  # remove its /dev/shm scratch at exit
    return _DEFAULT

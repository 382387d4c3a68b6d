"""Data types shared by the host side of the sandbox: limits, results, the detected mechanism, the error.

Standard library only. The supervisor (:mod:`codegrpo.sandbox.supervisor`) does not import this module: limits
travel to it as plain dicts (``dataclasses.asdict``) and results come back as JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

# Guards of the pytest harness (docs/sandbox.md, *Guards*): when one fires the sample scores 0.
HACK_GUARDS = (
    "extra_test_ids",
    "missing_test_ids",
    "unknown_test_ids",
    "truncated_report",
    "report_write_error",
    "canary",
    "supervisor_lost",
    "protocol_violation",
)

__all__ = ["HACK_GUARDS", "SandboxLimits", "PytestResult", "ExecResult", "CompileResult", "SandboxInfo", "SandboxError"]


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
    hack: str | None = None  # the guard that fired (then executed=False, passed=0); see HACK_GUARDS
    #: per collected test item (pytest node id, passed), in collection order; empty when nothing was collected,
    #: all False when the run does not count (collection error, guard fired); VeRPO's per-test weights read it
    outcomes: tuple = ()

    @property
    def hack_detected(self) -> bool:
        return self.hack is not None

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


@dataclass(frozen=True)
class SandboxInfo:
    """The isolation in use here (see :func:`codegrpo.sandbox.bwrap.sandbox_info`)."""

    mechanism: str  # "bwrap" or "rlimits"
    private_uid: bool
    reason: str


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program under test)."""

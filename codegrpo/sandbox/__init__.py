"""Execution sandbox for untrusted programs: Python solutions under pytest, and compiled C binaries.

Generated programs run only here (the KodCode rewards, the evaluation of generated Python and of decompiled C).
Isolation uses OS mechanisms, not Python-level patching: namespaces (``bwrap``), a private uid per job, resource
limits, a scrubbed environment and bounded output (docs/sandbox.md).

Modules, each readable alone:

* :mod:`~codegrpo.sandbox.client` — the host side: the supervisor pool (:class:`Sandbox`), :func:`make_sandbox`
  (the one way to build one from config), :func:`default_sandbox` and the module-level ``run_tests`` /
  ``run_binary`` / ``compile_c``;
* :mod:`~codegrpo.sandbox.launcher` — one supervisor process seen from the host (start, request, stop);
* :mod:`~codegrpo.sandbox.verdict` — the runner's copy of the test file and the verdict on its report (guards);
* :mod:`~codegrpo.sandbox.bwrap` — what the sandbox sees (mount plan), the ``bwrap`` command line, and which
  isolation is available here (:func:`sandbox_info`);
* :mod:`~codegrpo.sandbox.supervisor` — the standard-library-only program that runs inside the sandbox and
  runs the jobs' steps, with :mod:`~codegrpo.sandbox.processes` (fork, limits, private uids, kill and reap);
* :mod:`~codegrpo.sandbox.pytest_driver` — KodCode's pytest harness in a job, the only user of private
  ``_pytest`` APIs (the fork server prepares pytest's session once);
* :mod:`~codegrpo.sandbox.types` — limits, results, :class:`SandboxError`.

Test results the solution cannot write: a pytest job runs the solution in one process and the test file in a
trusted runner under another uid, joined by a plain-data boundary (:mod:`~codegrpo.sandbox.rpc` and its parts
``rpc_rules``, ``rpc_proxy``, ``rpc_endpoint``); the verdict is checked on the host against the test file as
written (``PytestResult.hack`` names a guard that fired). docs/sandbox.md states what is and is not guaranteed.
"""

from codegrpo.sandbox.bwrap import sandbox_info
from codegrpo.sandbox.client import (
    Sandbox,
    compile_c,
    count_test_functions,
    default_sandbox,
    kodcode_test_file,
    make_sandbox,
    run_binary,
    run_tests,
)
from codegrpo.sandbox.types import (
    HACK_GUARDS,
    CompileResult,
    ExecResult,
    PytestResult,
    SandboxError,
    SandboxInfo,
    SandboxLimits,
)

__all__ = [
    "HACK_GUARDS",
    "Sandbox",
    "SandboxLimits",
    "SandboxError",
    "SandboxInfo",
    "PytestResult",
    "ExecResult",
    "CompileResult",
    "make_sandbox",
    "default_sandbox",
    "sandbox_info",
    "run_tests",
    "run_binary",
    "compile_c",
    "kodcode_test_file",
    "count_test_functions",
]

"""Execution sandbox for untrusted programs: Python solutions under pytest, and compiled C binaries.

Generated programs run only here (the KodCode rewards, the evaluation of generated Python and of decompiled C).
Isolation uses OS mechanisms, not Python-level patching: namespaces (``bwrap``), a private uid per job, resource
limits, a scrubbed environment and bounded output (docs/sandbox.md).

Modules, each readable alone:

* :mod:`~codegrpo.sandbox.client` — the host side: the supervisor pool (:class:`Sandbox`), :func:`make_sandbox`
  (the one way to build one from config), :func:`default_sandbox` and the module-level ``run_tests`` /
  ``run_binary`` / ``compile_c``;
* :mod:`~codegrpo.sandbox.bwrap` — what the sandbox sees (mount plan), the ``bwrap`` command line, and which
  isolation is available here (:func:`sandbox_info`);
* :mod:`~codegrpo.sandbox.supervisor` — the standard-library-only program that runs inside the sandbox and
  forks, limits and reaps the jobs;
* :mod:`~codegrpo.sandbox.pytest_driver` — KodCode's pytest harness in a job, the only user of private
  ``_pytest`` APIs (the fork server prepares pytest's session once);
* :mod:`~codegrpo.sandbox.types` — limits, results, :class:`SandboxError`.

Known limit (shared with KodCode's own harness): the solution runs in the same process as the test runner, so
a hostile solution can tamper with pytest's reporting. Rewards computed from these results must be treated as
untrusted signals, which is what GRPO rewards are.
"""

from codegrpo.sandbox.bwrap import sandbox_info
from codegrpo.sandbox.client import (Sandbox, compile_c, count_test_functions, default_sandbox, kodcode_test_file,
                                     make_sandbox, run_binary, run_tests)
from codegrpo.sandbox.types import (CompileResult, ExecResult, PytestResult, SandboxError, SandboxInfo,
                                    SandboxLimits)

__all__ = ["Sandbox", "SandboxLimits", "SandboxError", "SandboxInfo", "PytestResult", "ExecResult",
           "CompileResult", "make_sandbox", "default_sandbox", "sandbox_info", "run_tests", "run_binary",
           "compile_c", "kodcode_test_file", "count_test_functions"]

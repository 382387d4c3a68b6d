"""A pytest job's test file and its verdict on the host: what the runner runs, and what its report may say.

:func:`kodcode_test_file` and :func:`canary_test` make the runner's copy of the test file; :func:`pytest_result`
turns the trusted runner's report into a :class:`~codegrpo.sandbox.types.PytestResult`, checked against the test
file as written (:func:`test_function_names`; the guards of ``HACK_GUARDS`` name themselves in ``hack``: see
docs/sandbox.md, *Results the solution cannot write*). :func:`exec_result` reads a program's step.

Standard library only (and :func:`codegrpo.contracts.parse_python`, the host's one ``ast.parse``).
"""

from __future__ import annotations

import ast

from codegrpo.contracts import parse_python
from codegrpo.sandbox.types import ExecResult, PytestResult

WRITE_FAILED = 97  # the runner's exit status after a failed report write (pytest_driver.WRITE_FAILED)


def kodcode_test_file(test_code: str) -> str:
    """The test module as KodCode runs it: ``from solution import *`` followed by the tests."""
    return "from solution import *\n" + test_code


def canary_test(name: str) -> str:
    """A test appended to the runner's copy of the test file that must fail: it compares what the solution
    exports with a fresh object. It passes only if the runner's comparisons or its reporting were subverted.
    It fails through ``pytest.fail(pytrace=False)``: no traceback to format, so it costs next to nothing."""
    return (
        f"\n\ndef {name}():\n"
        "    import pytest as _cg_pytest\n"
        "    import solution as _cg_m\n"
        "    class _CgNothing:\n"
        "        pass\n"
        "    _cg_x = _CgNothing()\n"
        "    if not any(getattr(_cg_m, _n, None) == _cg_x for _n in list(_cg_m.__all__)[:8]):\n"
        "        _cg_pytest.fail('canary', pytrace=False)\n"
    )


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
            n += sum(
                1
                for b in node.body
                if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.name.startswith("test")
            )
    return n


def pytest_result(step: dict, test_code: str, dt: float, mech: str, canary: str | None = None) -> PytestResult:
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
    per_test = (
        tuple((nid, bool(counted and outcomes.get(nid, False))) for nid in test_items) if not collection_error else ()
    )
    err = rep.get("import_error") if isinstance(rep.get("import_error"), str) else step.get("error")
    if hack is not None:
        err = f"harness guard fired: {hack}" + (f" ({err})" if err else "")
    return PytestResult(
        executed=executed,
        passed=passed,
        total=total,
        timed_out=timed_out,
        collection_error=collection_error,
        error=err,
        stdout=step.get("stdout", ""),
        stderr=step.get("stderr", ""),
        duration_s=dt,
        mechanism=mech,
        returncode=step.get("returncode"),
        signal=step.get("signal"),
        hack=hack,
        outcomes=per_test,
    )


def exec_result(step: dict, mech: str) -> ExecResult:
    return ExecResult(
        returncode=step.get("returncode"),
        signal=step.get("signal"),
        timed_out=bool(step.get("timed_out")),
        stdout=step.get("stdout", ""),
        stderr=step.get("stderr", "") + (f"\n[sandbox] {step['error']}" if step.get("error") else ""),
        duration_s=float(step.get("duration_s", 0.0)),
        mechanism=mech,
    )

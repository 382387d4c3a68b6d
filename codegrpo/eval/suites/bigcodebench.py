"""BigCodeBench suites (Full, Hard): loader and sandboxed harness (codegrpo.eval.suites)."""

from __future__ import annotations

from codegrpo.contracts import parse_python
import ast
import dataclasses
import importlib.util
from typing import Iterable, Mapping

from codegrpo.eval import bcb_tests
from codegrpo.eval.problems import Problem, SampleResult, parses
from codegrpo.eval.suite_candidates import BCB_CANDIDATE
from codegrpo.eval.suites.common import BenchmarkDataError, exec_note, need, read_records, resolve_source, suite_verdict
from codegrpo.eval.suites.common import verdict_result

_BCB_FIELDS = {
    "task_id": str,
    "complete_prompt": str,
    "instruct_prompt": str,
    "canonical_solution": str,
    "code_prompt": str,
    "test": str,
    "entry_point": str,
    "libs": (str, list),
}


def _bcb_libs(path, line: int, value) -> list[str]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError) as exc:
            raise BenchmarkDataError(f"{path}: line {line}: field 'libs' is not a list literal: {exc}") from exc
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
        raise BenchmarkDataError(f"{path}: line {line}: field 'libs' must be a list of module names")
    return list(value)


def _hub_records(repo: str, split: str) -> Iterable[tuple[int, dict]]:
    import datasets

    ds = datasets.load_dataset(repo, split=split)
    for i, rec in enumerate(ds, 1):
        yield i, dict(rec)


def load_bigcodebench(
    benchmark: str, source: str, version: str, prompt: str = "instruct", limit: int | None = None
) -> list[Problem]:
    if prompt not in ("instruct", "complete"):
        raise ValueError(f"bigcodebench prompt must be 'instruct' or 'complete', got {prompt!r}")
    kind, path = resolve_source(source)
    records = read_records(path) if kind == "file" else _hub_records(str(source), version)
    where = path if kind == "file" else f"{source}[{version}]"
    out = []
    for line, rec in records:
        need(where, line, rec, _BCB_FIELDS)
        libs = _bcb_libs(where, line, rec["libs"])
        if prompt == "instruct":
            question = rec["instruct_prompt"]
        else:
            question = (
                "Complete the following Python function.\n\n```python\n" + rec["complete_prompt"].rstrip() + "\n```"
            )
        from codegrpo.data.kodcode import build_prompt

        out.append(
            Problem(
                problem_id=rec["task_id"],
                prompt=build_prompt(question, None, [rec["entry_point"]], tests_import=False),
                tests=rec["test"],
                entry_point=rec["entry_point"],
                reference=rec["complete_prompt"] + "\n" + rec["canonical_solution"],
                prefix=rec["code_prompt"],
                extra={"suite": "bigcodebench", "libs": libs, "source": f"{where}:{line}"},
            )
        )
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise BenchmarkDataError(f"{where}: no tasks")
    return out


def missing_modules(libs: Iterable[str]) -> list[str]:
    """The top-level modules of ``libs`` that this interpreter (the sandbox's) cannot import."""
    out = []
    for lib in libs:
        top = lib.split(".")[0]
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(top)
    return sorted(set(out))


def score_bigcodebench(problem: Problem, code: str, sample: int, sandbox, timeout: float, cfg: Mapping) -> SampleResult:
    program = code
    if cfg.get("calibrated", True):
        # BigCodeBench's calibrated evaluation: the task's imports and signature (code_prompt) come first
        program = problem.prefix + "\n    pass\n" + code
    missing = missing_modules(problem.extra["libs"])
    if missing:
        return SampleResult(
            problem.problem_id,
            sample,
            parses(program),
            False,
            False,
            0,
            1,
            "missing libraries: " + ", ".join(missing),
            missing_libs=missing,
        )
    limit_s = float(cfg.get("timeout_s", 240.0))
    lim = dataclasses.replace(
        sandbox.limits,
        memory_mb=max(sandbox.limits.memory_mb, int(cfg.get("memory_mb", 8192))),
        nproc=max(sandbox.limits.nproc, 256),
    )
    strict = bcb_test_names(problem.tests)[1]
    # every test renamed at random (the runner keeps the map), canaries cloned from real tests among them
    test, renamed, canaries = bcb_tests.disguise(problem.tests, bcb_canary)
    task = {
        "test": test,
        "timeout": limit_s,
        "canaries": canaries,
        "test_names": renamed,
        "strict_names": strict,
        "program": program,
    }
    out, res = suite_verdict(
        sandbox, "bcb", task, {"solution.py": BCB_CANDIDATE, "program.py": program}, limit_s + 10, limits=lim
    )
    ok = out.get("status") == "pass"
    n = int(out.get("n") or 0)
    failed = out.get("failed") or {}
    detail = (
        ""
        if ok
        else (out.get("error") or (f"failed: {', '.join(sorted(failed))}" if failed else "") or exec_note(res))[:300]
    )
    return verdict_result(problem, sample, program, out, ok, max(0, n - len(failed)) if n else 0, max(n, 1), detail)


def bcb_test_names(test_code: str) -> tuple[set[str], bool]:
    """The ``test*`` methods of class ``TestCases`` as written, and whether that set is complete (the class's
    bases are only ``TestCase``: no inherited tests), so that a run reporting other names is a forgery."""
    try:
        tree = parse_python(test_code)
    except SyntaxError:
        return set(), False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "TestCases":
            names = {
                f.name
                for f in node.body
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name.startswith("test")
            }
            strict = all(
                (isinstance(b, ast.Name) and b.id == "TestCase")
                or (isinstance(b, ast.Attribute) and b.attr == "TestCase")
                for b in node.bases
            )
            return names, strict
    return set(), False


def bcb_canary(name: str) -> str:
    """A test added to ``TestCases`` that must fail (a harness patched to pass everything passes it)."""
    return f"\n\n\ndef {name}(self):\n    self.assertEqual(0, 1)\n\n\nTestCases.{name} = {name}\ndel {name}\n"

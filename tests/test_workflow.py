"""The scripts' shared prologue (codegrpo.workflow.script_job, around failure_logged): the job's log gets the
records, a failure is logged with its traceback and raised again; every workflow script uses it (issue 26)."""

from __future__ import annotations

import ast
import logging
from types import SimpleNamespace

import pytest

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged, script_job

from tests.conftest import REPO_ROOT as REPO


def test_failure_is_logged_with_traceback_and_raised(tmp_path):
    log = tmp_path / "job.log"
    log_to(log)
    try:
        with pytest.raises(ZeroDivisionError):
            with failure_logged("step %s failed", "x"):
                1 / 0  # noqa: B018 (the division raises)
        with failure_logged("never written"):
            pass
    finally:
        logging.basicConfig(force=True, handlers=[logging.NullHandler()])
    text = log.read_text(encoding="utf-8")
    assert "ERROR root: step x failed" in text
    assert "Traceback" in text and "ZeroDivisionError" in text
    assert "never written" not in text


def test_script_job_logs_to_the_job_log_and_names_the_rule(tmp_path):
    sm = SimpleNamespace(log=[str(tmp_path / "a.log")], rule="some_rule")
    other = SimpleNamespace(log=[str(tmp_path / "b.log")], rule="other_rule")
    try:
        with script_job(sm) as got:
            assert got is sm
            logging.info("body ran")
        with pytest.raises(KeyError):
            with script_job(other, "other_rule x"):
                raise KeyError("missing")
    finally:
        logging.basicConfig(force=True, handlers=[logging.NullHandler()])
    assert "body ran" in (tmp_path / "a.log").read_text(encoding="utf-8")
    text = (tmp_path / "b.log").read_text(encoding="utf-8")
    assert "ERROR root: other_rule x failed" in text and "KeyError: 'missing'" in text
    assert "body ran" not in text


def test_every_script_uses_the_prologue():
    scripts = sorted((REPO / "workflow_scripts").glob("*.py"))
    assert len(scripts) >= 20
    for path in scripts:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        withs = [
            n
            for n in tree.body
            if isinstance(n, ast.With) and ast.unparse(n.items[0].context_expr.func) == "script_job"
        ]
        assert len(withs) == 1, f"{path.name}: the body is not one `with script_job(snakemake) as sm` block"
        assert not any(isinstance(n, ast.Try) for n in tree.body), f"{path.name}: a try block of its own"


def test_codegen_scoring_reads_the_rule_and_fits_the_entry_points():
    import inspect

    from codegrpo.eval import codegen, codegen_runs
    from codegrpo.workflow import codegen_scoring

    params = {"limit": 3, "timeout_s": 7.5, "sandbox": {"memory_mb": 512}, "suites": {"x": 1}, "ks": [1]}
    sm = SimpleNamespace(params=SimpleNamespace(**params, items=params.items), threads=4)
    kw = codegen_scoring(sm)
    assert kw == {
        "limit": 3,
        "workers": 4,
        "timeout": 7.5,
        "sandbox_limits": {"memory_mb": 512},
        "cfg": params,
        "suites": {"x": 1},
    }
    assert set(kw) <= set(inspect.signature(codegen.run_reference).parameters)
    for fn in (codegen_runs.run_model_benchmarks, codegen_runs.score_samples_files):
        # the scoring options pass through **scoring, checked against SCORING_OPTIONS before any model loads
        accepted = set(inspect.signature(fn).parameters) | set(codegen_runs.SCORING_OPTIONS)
        assert set(kw) <= accepted, fn.__name__

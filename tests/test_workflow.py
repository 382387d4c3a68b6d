"""The scripts' shared error prologue (codegrpo.workflow.failure_logged): a failure is logged with its traceback
and raised again; every workflow script uses it (issue 26)."""

from __future__ import annotations

import ast
import logging

import pytest

from codegrpo.io import log_to
from codegrpo.workflow import failure_logged

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


def test_every_script_uses_the_prologue():
    scripts = sorted((REPO / "workflow_scripts").glob("*.py"))
    assert len(scripts) >= 20
    for path in scripts:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        withs = [
            n
            for n in tree.body
            if isinstance(n, ast.With) and ast.unparse(n.items[0].context_expr.func) == "failure_logged"
        ]
        assert len(withs) == 1, f"{path.name}: the body is not one `with failure_logged(...)` block"
        assert not any(isinstance(n, ast.Try) for n in tree.body), f"{path.name}: a try block of its own"

"""The learning checks' report page (codegrpo.learning.report) from the real runs of the direction and
curriculum checks (tests/learning/conftest.py, once for the package; slow, run in CI)."""

from __future__ import annotations

import pytest

from codegrpo import learning


@pytest.mark.slow
def test_learning_report_page(toy_runs, curriculum_run, tmp_path):
    _, verdicts = toy_runs
    _, cur = curriculum_run
    ok = learning.write_report(
        verdicts, cur, tmp_path / "report.md", tmp_path / "rewards.png", tmp_path / "timeline.png"
    )
    assert ok
    md = (tmp_path / "report.md").read_text()
    assert "not paper results" in md
    for check in learning.CHECKS:
        assert f"| {check} |" in md
    assert md.count("| pass |") == len(learning.CHECKS)
    assert (tmp_path / "rewards.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"

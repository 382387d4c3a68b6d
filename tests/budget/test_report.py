"""The budget's Markdown (codegrpo.budget.report): the CPU default plan's table and the checked-in paper table
(docs/budget-paper.md) being current."""

import math


from codegrpo import budget
from codegrpo.config import load_config

from tests.budget.conftest import paper_with as _cfg
from tests.conftest import REPO_ROOT as ROOT


def test_cpu_default_plan(tmp_path):
    cfg = load_config(ROOT / "config.yaml", check_files=False)
    cfg["results_dir"] = str(tmp_path)
    b = budget.build_budget(cfg)
    assert b["problems"] == [] and b["totals"]["gpu_hours"] == 0
    assert {j["run"] for j in b["jobs"]} >= {"sft_skeleton", "skeleton_rl", "skin_rl", "dhrcl-full-seed0"}
    assert all(j["memory"] is None and j["params"] > 0 for j in b["jobs"])
    md = budget.budget_markdown(b)
    assert "| dhrcl-full-seed0 | tiny |" in md


def test_checked_in_paper_budget_is_current(paper_cfg, tmp_path):
    """docs/budget-paper.md is what `python -m codegrpo.budget --config config/paper.yaml --md
    docs/budget-paper.md` writes (rows from budget.expected_rows: no data built)."""
    cfg = _cfg(paper_cfg, tmp_path)
    cmd = "python -m codegrpo.budget --config config/paper.yaml --md docs/budget-paper.md"
    want = budget.budget_markdown(budget.build_budget(paper_cfg, use_files=False), command=cmd)
    assert (ROOT / "docs" / "budget-paper.md").read_text(encoding="utf-8") == want
    assert not math.isnan(budget.build_budget(cfg)["totals"]["gpu_hours"])

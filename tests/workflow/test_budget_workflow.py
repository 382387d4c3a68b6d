"""`snakemake budget` writes results/budget.{md,json} for the CPU default (the rule and its thin script)."""

from __future__ import annotations

import json

import yaml

from tests.conftest import REPO_ROOT as REPO, run_snakemake


def test_snakemake_budget_cpu_default(tmp_path):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg.update(results_dir=str(tmp_path / "results"), logs_dir=str(tmp_path / "logs"))
    r = run_snakemake("--cores", "1", "budget", overlay=cfg, tmp_path=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((tmp_path / "results" / "budget.json").read_text())
    assert data["device"] == "cpu" and data["problems"] == []
    runs = {j["run"]: j for j in data["jobs"]}
    assert runs["dhrcl-full-seed0"]["total_steps"] == cfg["dhrcl"]["training"]["total_training_steps"]
    assert "| skeleton_rl | tiny |" in (tmp_path / "results" / "budget.md").read_text()

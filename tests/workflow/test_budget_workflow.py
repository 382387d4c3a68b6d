"""`snakemake budget` writes results/budget.{md,json} for the CPU default (the rule and its thin script)."""

from __future__ import annotations

import json
import subprocess

import yaml

from tests.conftest import REPO_ROOT as REPO


def test_snakemake_budget_cpu_default(snakemake_bin, tmp_path):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg.update(results_dir=str(tmp_path / "results"), logs_dir=str(tmp_path / "logs"))
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run(
        [snakemake_bin, "--nolock", "--cores", "1", "budget", "--configfile", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((tmp_path / "results" / "budget.json").read_text())
    assert data["device"] == "cpu" and data["problems"] == []
    runs = {j["run"]: j for j in data["jobs"]}
    assert runs["dhrcl-full-seed0"]["total_steps"] == cfg["dhrcl"]["training"]["total_training_steps"]
    assert "| skeleton_rl | tiny |" in (tmp_path / "results" / "budget.md").read_text()

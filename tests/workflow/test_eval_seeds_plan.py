"""Snakemake plans of the evaluation and DHRCL seeds: one seed or all seeds, and MBPP-Decompile beside
HumanEval-Decompile (dry runs only)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _plan(snakemake_bin, tmp_path, *targets, configfile="config.yaml", overlay=None):
    cfg = yaml.safe_load((REPO / configfile).read_text())
    for key, val in (overlay or {}).items():
        cfg[key] = {**cfg.get(key, {}), **val} if isinstance(val, dict) else val
    cfg.update(results_dir=str(tmp_path / "results"), logs_dir=str(tmp_path / "logs"))
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([snakemake_bin, "--nolock", "-n", *targets, "--configfile", str(path)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def _outputs(stdout: str, rule: str) -> list[str]:
    """The outputs (comma-separated, as printed) of the planned jobs of ``rule``."""
    return re.findall(rf"^(?:local)?rule {rule}:\n(?:    (?!output:).*\n)*?    output: (.*)$", stdout, re.M)


def test_dhrcl_plans_one_seed_or_all(snakemake_bin, tmp_path):
    two = {"dhrcl": {"seeds": [0, 1]}}
    every = _outputs(_plan(snakemake_bin, tmp_path, "dhrcl", overlay=two), "dhrcl_train")
    assert sorted(o.split(",")[0] for o in every) == sorted(
        f"{tmp_path}/results/runs/dhrcl-{v}-seed{s}/done.json" for v in ("full", "baseline_pass_rate") for s in (0, 1))
    one = _outputs(_plan(snakemake_bin, tmp_path, "dhrcl_seed1", overlay=two), "dhrcl_train")
    assert sorted(o.split(",")[0] for o in one) == sorted(
        f"{tmp_path}/results/runs/dhrcl-{v}-seed1/done.json" for v in ("full", "baseline_pass_rate"))
    # evaluation follows the seeds: each seed's run on each code-generation benchmark
    evals = _outputs(_plan(snakemake_bin, tmp_path, "evaluate", overlay=two), "eval_codegen")
    assert len(evals) == 2 * 2 * 2 and any("/eval/dhrcl-full-seed1/humaneval.json" in o for o in evals)


def test_paper_config_plans_three_seeds(snakemake_bin, tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    assert cfg["dhrcl"]["seeds"] == [0, 1, 2]
    runs = _outputs(_plan(snakemake_bin, tmp_path, "dhrcl", configfile="config/paper.yaml"), "dhrcl_train")
    assert len(runs) == 3 * len(cfg["dhrcl"]["runs"])
    one = _outputs(_plan(snakemake_bin, tmp_path, "dhrcl_seed2", configfile="config/paper.yaml"), "dhrcl_train")
    assert len(one) == len(cfg["dhrcl"]["runs"]) and all("-seed2/" in o for o in one)


@pytest.mark.parametrize("configfile", ["config.yaml", "config/paper.yaml"])
def test_mbpp_decompile_is_planned_beside_humaneval(snakemake_bin, tmp_path, configfile):
    out = _plan(snakemake_bin, tmp_path, "evaluate", configfile=configfile)
    cfg = yaml.safe_load((REPO / configfile).read_text())["evaluate"]["decompile"]
    base = _outputs(out, "eval_decompile_baseline")
    assert sorted(o.rsplit("/", 2)[-2] for o in base if o.endswith("mbpp_decompile.json")) == sorted(
        cfg["mbpp"]["baselines"])
    systems = _outputs(out, "eval_decompile_system")
    for name in (s["name"] for s in cfg["systems"]):
        assert any(o.endswith(f"/eval/{name}/mbpp_decompile.json") for o in systems)
        assert any(o.endswith(f"/eval/{name}/humaneval_decompile.json") for o in systems)

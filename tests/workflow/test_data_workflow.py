"""The data stage through Snakemake: planning, a bad config, a full run, and a bad input stopping the run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from codegrpo.data.generate import GENERATED_DATASETS
from tests.conftest import job_counts, run_snakemake

DATA_JOBS = {"data_ingest": 3, "data_normalize": 3, "data_headers": 3, "data_parquet": 4, "data_kodcode": 1, "data": 1}


def test_dry_run_plans_data_jobs(snakemake_bin, repo_root, tmp_path):
    proc = run_snakemake("-n", "data", "--config", f"results_dir={tmp_path}/res", f"logs_dir={tmp_path}/logs")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_counts(proc.stdout) == DATA_JOBS


def test_dry_run_bad_configfile_is_readable(snakemake_bin, repo_root, tmp_path):
    cfg = yaml.safe_load((repo_root / "config.yaml").read_text())
    cfg["datasets"]["sk2d_rl_examples"]["shape"] = "csv"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    proc = run_snakemake("-n", "data", "--configfile", str(bad))
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "'csv' is not one of ['verl', 'raw']" in out, out[-3000:]


def _config_with(repo_root, tmp_path, **changes) -> Path:
    cfg = yaml.safe_load((repo_root / "config.yaml").read_text())
    cfg.update(results_dir=str(tmp_path / "res"), logs_dir=str(tmp_path / "logs"))
    for key, value in changes.items():
        cfg[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_snakemake_data_run(snakemake_bin, repo_root, tmp_path):
    res = tmp_path / "res" / "data"
    proc = run_snakemake("data", "--cores", "2", "--config", f"results_dir={tmp_path}/res", f"logs_dir={tmp_path}/logs")
    assert proc.returncode == 0, proc.stderr[-4000:]
    rl = json.loads((res / "sk2d_rl_examples" / "summary.json").read_text())
    assert rl["records"] == 100 and rl["ingest"]["rejected"] == 0
    assert rl["header_status_counts"]["missing"] == 1
    assert rl["header_status_counts"]["ok"] + rl["header_status_counts"]["fails"] == 99
    assert rl["gcc_version"].startswith("gcc") and rl["psyche_c_used"] in (True, False)
    tsv = (res / "sk2d_rl_examples" / "headers.tsv").read_text().splitlines()
    assert tsv[0] == "id\theader_status\treason" and len(tsv) == 101
    assert any(line.startswith("87208\tmissing\t") for line in tsv)
    p2n = json.loads((res / "pseudo2norm_examples" / "summary.json").read_text())
    assert p2n["normalize"]["normalize"] is True
    assert p2n["normalize"]["kept"] + p2n["normalize"]["dropped"] == 20 == p2n["ingest"]["accepted"]
    assert "clang-format version" in p2n["normalize"]["clang_format"]
    for role, stage, n in (
        ("rl", "skeleton", 100),
        ("rl", "skin", 20),
        ("sft", "skeleton", p2n["records"]),
        ("sft", "skin", 20),
    ):
        train = pd.read_parquet(res / role / f"{stage}.train.parquet")
        val = pd.read_parquet(res / role / f"{stage}.val.parquet")
        assert len(train) >= 1 and len(val) >= 1 and len(train) + len(val) == n
        if role == "sft":
            assert list(train.columns) == ["prompt", "response"]
        else:
            assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    kc = json.loads((res / "kodcode" / "summary.json").read_text())
    assert all(kc["slices"][s] >= 1 for s in ("train", "val", "heldout"))
    for s in ("train", "val", "heldout"):
        assert len(pd.read_parquet(res / "kodcode" / f"{s}.parquet")) == kc["slices"][s]
    assert "headers: {'ok': " in (tmp_path / "logs" / "data_headers" / "sk2d_rl_examples.log").read_text()
    # nothing left to do: a second dry run plans no job
    again = run_snakemake("-n", "data", "--config", f"results_dir={tmp_path}/res", f"logs_dir={tmp_path}/logs")
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_bad_input_stops_run_or_is_quarantined(snakemake_bin, repo_root, tmp_path):
    fixture = repo_root / "tests" / "fixtures" / "data" / "missing_field.jsonl"
    datasets = {"bad_rl": {"path": str(fixture), **GENERATED_DATASETS["rl_skeleton"]}}  # read as rl_skeleton is
    cfg = _config_with(repo_root, tmp_path, datasets=datasets)
    target = f"{tmp_path}/res/data/bad_rl/summary.json"
    proc = run_snakemake("--configfile", str(cfg), "--cores", "1", target)
    assert proc.returncode != 0
    log = (tmp_path / "logs" / "data_ingest" / "bad_rl.log").read_text()
    assert f"{fixture}:3: field 'reward_model': missing" in log
    assert not (tmp_path / "res" / "data" / "bad_rl").exists() or not any(
        (tmp_path / "res" / "data" / "bad_rl").iterdir()
    )

    cfg = _config_with(repo_root, tmp_path, datasets=datasets, on_bad_record="quarantine")
    proc = run_snakemake("--configfile", str(cfg), "--cores", "1", target)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(Path(target).read_text())
    assert summary["ingest"]["rejected"] == 1 and summary["records"] == 3
    rejects = [json.loads(x) for x in (tmp_path / "res/data/bad_rl/rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["field"]) for r in rejects] == [(3, "reward_model")]

"""Rule data_kodcode on a local copy of the KodCode release (Parquet, the release's columns) with the
configured filters, the sandbox verification of the reference solutions and HumanEval decontamination."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import yaml

from tests.data.test_kodcode import release_rows, write_release  # noqa: E402


def test_data_kodcode_reads_the_release_copy(snakemake_bin, repo_root, data_dir, tmp_path):
    rows = release_rows(data_dir, n_alg=6, n_prefill=14)
    src = write_release(rows, tmp_path / "train-00000-of-00001.parquet")
    cfg = yaml.safe_load((repo_root / "config.yaml").read_text())
    cfg.update(results_dir=str(tmp_path / "res"), logs_dir=str(tmp_path / "logs"))
    cfg["data"]["kodcode"].update(
        source={"path": str(src), "cache_dir": str(tmp_path / "hf")},
        gpt_difficulty=["easy", "medium"],
        verify_solutions=True,
    )
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "res" / "data" / "kodcode"
    proc = subprocess.run(
        [snakemake_bin, "--configfile", str(cfg_path), "--cores", "2", str(out / "summary.json")],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["inputs"] == [str(src)] and summary["records_read"] == 20
    v = summary["verification"]
    assert v["enabled"] and v["checked"] == v["passed"] + sum(v["failed_by_reason"].values())
    assert summary["decontamination"]["sets"] == {"humaneval": 164}
    assert summary["filtered"] == sum(summary["filtered_by_reason"].values())
    n = sum(len(pd.read_parquet(out / f"{s}.parquet")) for s in ("train", "val", "heldout"))
    assert n == summary["accepted"] == v["passed"] >= 10
    log = (tmp_path / "logs" / "data_kodcode" / "kodcode.log").read_text()
    assert "kodcode: 20 read" in log

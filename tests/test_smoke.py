"""codegrpo.smoke on CPU: what can run without a GPU does run (the report, the process isolation and time limits
of checks, the verl import, the embedding server up and down for real); the GPU checks fail cleanly here."""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path


from codegrpo import smoke
from codegrpo.smoke import Check, CheckResult

from tests.conftest import REPO_ROOT as REPO


def test_report_lists_each_check_with_status_time_and_error(tmp_path):
    results = [
        CheckResult(
            "import_vllm",
            "failed",
            1.25,
            "ModuleNotFoundError: No module named 'vllm'",
            {"traceback": "Traceback ...\nModuleNotFoundError"},
        ),
        CheckResult("embedding_server", "ok", 12.0, "", {"dim": 384}),
        CheckResult("odd", "failed", 0.5, "a | b\nc", {}),
    ]
    report = smoke.write_report(
        results,
        tmp_path / "report.md",
        tmp_path / "report.json",
        env={"host": "n1", "gpus": ["NVIDIA H100, 81559 MiB, 550.54"]},
        total_s=14.0,
    )
    md = (tmp_path / "report.md").read_text()
    assert "1 of 3 checks ok, 2 failed, 14.0 s in all." in md
    assert "| import_vllm | failed | 1.2 | ModuleNotFoundError: No module named 'vllm' |" in md
    assert "| embedding_server | ok | 12.0 |  |" in md
    assert "| odd | failed | 0.5 | a \\| b c |" in md  # one table row, whatever the error holds
    assert "| gpus | NVIDIA H100, 81559 MiB, 550.54 |" in md
    assert '"dim": 384' in md and "<summary>traceback</summary>" in md
    data = json.loads((tmp_path / "report.json").read_text())
    assert data == report and data["summary"] == {"ok": 1, "failed": 2, "total_s": 14.0}
    assert [c["status"] for c in data["checks"]] == ["failed", "ok", "failed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.md"]  # no temp files left


def test_missing_vllm_fails_cleanly(tmp_path):
    imp = smoke.run_check(Check("import_vllm", "codegrpo.smoke:check_import", {"module": "vllm"}, 120), tmp_path)
    assert imp.status == "failed" and imp.error == "ModuleNotFoundError: No module named 'vllm'"
    assert imp.seconds > 0 and "import_module" in imp.detail["traceback"]
    eng = smoke.run_check(
        Check("vllm_engine", "codegrpo.smoke:check_vllm_engine", {"model_dir": str(tmp_path / "no-model")}, 120),
        tmp_path,
    )
    assert eng.status == "failed" and "backend 'vllm' needs the vllm package" in eng.error


def test_a_check_past_its_time_limit_is_killed_with_its_children(tmp_path):
    marker = f"sleep {time.time_ns() % 100000 + 300}"
    t0 = time.monotonic()
    res = smoke.run_check(Check("hang", "subprocess:run", {"args": ["sh", "-c", f"{marker}; true"]}, 3), tmp_path)
    assert res.status == "failed" and res.error.startswith("timed out after 3s (killed)")
    assert time.monotonic() - t0 < 60
    time.sleep(0.5)
    alive = [
        p
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and marker.encode() in (p / "cmdline").read_bytes().replace(b"\0", b" ")
        if (p / "cmdline").exists()
    ]
    assert alive == []


def test_a_crashing_check_is_reported(tmp_path):
    res = smoke.run_check(Check("crash", "os:abort", {}, 60), tmp_path)
    assert res.status == "failed" and "exited with status -6 without a result (crashed)" in res.error


def test_verl_workers_import_and_run_smoke_writes_the_report(tmp_path):
    checks = [
        Check("import_verl_workers", "codegrpo.smoke:check_import", {"module": "verl.workers.fsdp_workers"}, 300),
        Check("import_flash_attn", "codegrpo.smoke:check_import", {"module": "flash_attn"}, 120),
    ]
    report = smoke.run_smoke(checks, tmp_path, tmp_path / "report.md", tmp_path / "report.json")
    ok, failed = report["checks"]
    assert ok["status"] == "ok" and ok["detail"]["version"] == "0.4.1"
    assert failed["status"] == "failed" and "flash_attn" in failed["error"]
    assert report["summary"]["ok"] == 1 and report["environment"]["verl"] == "0.4.1"
    assert "| import_flash_attn | failed |" in (tmp_path / "report.md").read_text()


def test_plan_of_the_paper_config(paper, tmp_path):
    checks = smoke.plan_checks(paper, decompile_data="d.json", out_dir=tmp_path / "smoke", logs_dir=tmp_path / "logs")
    assert [c.name for c in checks] == [
        "tiny_model",
        "import_verl_workers",
        "import_vllm",
        "import_flash_attn",
        "sandbox",
        "vllm_engine",
        "embedding_server",
        "grpo_vllm",
        "eval_vllm",
    ]
    by = {c.name: c for c in checks}
    assert by["tiny_model"].kwargs["hidden_size"] == 256  # head size 64
    assert by["grpo_vllm"].kwargs["train"] == str(tmp_path / "smoke" / "toy" / "toy.train.parquet")
    assert by["embedding_server"].kwargs["section"]["server_command"].startswith("{python} -m vllm")
    assert by["eval_vllm"].kwargs["batch_size"] == 4
    assert sum(c.timeout_s for c in checks) <= 3600
    json.dumps([c.kwargs for c in checks])  # what goes to the child process
    # the GRPO check's config holds what run_grpo reads (its preflight looks at every training section)
    from codegrpo import preflight

    assert set(preflight.training_sections(by["grpo_vllm"].kwargs["cfg"])) >= {"sft", "skeleton_rl", "skin_rl"}


def test_smoke_resources_ask_for_one_gpu(paper, local):
    from codegrpo.cluster.resources import stage_resources

    r = stage_resources(paper, "smoke")
    assert r["gpu"] == 1 and r["nodes"] == 1 and r["tasks_per_gpu"] == 0 and r["runtime"] == 30
    assert "gpu" not in stage_resources(local, "smoke")
    cfg = copy.deepcopy(paper)
    cfg["device"] = "cpu"
    assert "gpu" not in stage_resources(cfg, "smoke")
    assert os.path.exists(REPO / smoke.decompile_data(paper))  # the smoke's own input, offline

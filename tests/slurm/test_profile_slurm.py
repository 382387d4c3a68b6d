"""The SLURM profile against a live cluster: jobs go through sbatch, and a cancelled (preempted) job is
retried and resumes from what it left behind."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from .conftest import REPO, run_snakemake

PROFILES = ("--profile", "slurm", "--profile", "profiles/ci")


def _first_dataset(workdir: Path) -> str:
    with open(workdir / "config.yaml", encoding="utf-8") as fh:
        return next(iter(yaml.safe_load(fh)["datasets"]))


def _squeue_state(job_id: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"], capture_output=True, text=True
    ).stdout.split()
    return out[0] if out else ""


def test_profile_runs_a_data_job_through_sbatch(workflow_copy):
    ds = _first_dataset(workflow_copy)
    target = f"results/data/{ds}/ingest_summary.json"
    proc = run_snakemake(workflow_copy, *PROFILES, target, timeout_s=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (workflow_copy / target).is_file()
    ids = re.findall(r"submitted with SLURM jobid (\d+)", proc.stderr)
    assert len(ids) == 1, proc.stderr[-3000:]
    # the executor's per-job log, named by the SLURM job id
    logs = list((workflow_copy / ".snakemake" / "slurm_logs" / "rule_data_ingest").rglob(f"{ids[0]}.log"))
    assert len(logs) == 1
    assert _squeue_state(ids[0]) == "COMPLETED"
    # the rule ran inside the SLURM job: its log shows the job-side Snakemake finishing the rule
    assert "Finished jobid: 0 (Rule: data_ingest)" in logs[0].read_text()


RESUMABLE = r'''
rule train:
    output:
        "done.txt",
    log:
        "train.log",
    resources:
        mem_mb=300,
        runtime=5,
    shell:
        """
        exec >> {log} 2>&1
        mkdir -p ckpt
        attempt=$(( $(cat ckpt/attempts 2>/dev/null || echo 0) + 1 )); echo $attempt > ckpt/attempts
        start=$(cat ckpt/step 2>/dev/null || echo 0)
        echo "job $SLURM_JOB_ID attempt $attempt resumes at step $start" >> ckpt/history
        for s in $(seq $((start + 1)) 4); do
            echo $s > ckpt/step
            if [ $attempt = 1 ] && [ $s = 2 ]; then scancel $SLURM_JOB_ID; sleep 120; fi
        done
        echo trained > {output}
        """
'''


def test_cancelled_job_is_retried_and_resumes(tmp_path):
    """A job cancelled mid-run (what preemption does) is resubmitted by the profile's `retries`, and the
    rerun finds the state it left outside its declared outputs (like a training run's checkpoints/)."""
    wd = tmp_path / "wf"
    wd.mkdir()
    (wd / "Snakefile").write_text(RESUMABLE)
    (wd / "config.yaml").write_text("{}\n")  # the CI layer names config.yaml
    proc = run_snakemake(
        wd, "--profile", str(REPO / "slurm"), "--profile", str(REPO / "profiles" / "ci"), timeout_s=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (wd / "done.txt").read_text() == "trained\n"
    history = (wd / "ckpt" / "history").read_text().splitlines()
    assert [h.split(" ", 2)[2] for h in history] == ["attempt 1 resumes at step 0", "attempt 2 resumes at step 2"], (
        history
    )
    first, second = (h.split()[1] for h in history)
    assert first != second
    assert _squeue_state(first) == "CANCELLED"
    assert _squeue_state(second) == "COMPLETED"
    assert sorted(p.stem for p in (wd / ".snakemake" / "slurm_logs" / "rule_train").rglob("*.log")) == sorted(
        [first, second]
    )


def test_smoke_job_runs_offline_with_the_configured_cache(workflow_copy, tmp_path, monkeypatch):
    """`snakemake smoke` through sbatch with hub.offline_jobs: the job's environment (sbatch --export=ALL from the
    Snakemake process that read the workflow) has the offline switches and HF_HOME = hub.cache_dir; the CPU checks
    pass inside the SLURM job and the GPU ones fail cleanly."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME"):  # only the workflow may set them
        monkeypatch.delenv(var, raising=False)
    cache = tmp_path / "hf-cache"
    (workflow_copy / "site.yaml").write_text(yaml.safe_dump({"hub": {"cache_dir": str(cache), "offline_jobs": True}}))
    proc = run_snakemake(workflow_copy, *PROFILES, "smoke", "--configfile", "config.yaml", "site.yaml", timeout_s=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = yaml.safe_load((workflow_copy / "results" / "smoke" / "report.json").read_text())
    env = report["environment"]
    assert env["slurm_job_id"] and env["hf_hub_offline"] == "1" and env["hf_datasets_offline"] == "1"
    assert env["hf_home"] == str(cache)
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status["tiny_model"] == status["embedding_server"] == status["import_verl_workers"] == "ok", report
    assert status["import_vllm"] == status["grpo_vllm"] == "failed"

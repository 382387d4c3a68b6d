"""Snakemake-level checks of the training stages: DAG plans for both configs, checkpoint import, the CPU chain."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.conftest import REPO_ROOT as REPO
from tests.conftest import job_counts, run_snakemake

TARGETS = ["sft", "skeleton_rl", "skin_rl"]


def _planned_jobs(stdout: str) -> list[dict]:
    """The jobs of a dry run: rule, wildcards, threads and priority of each (a dry run prints a job's lines after
    its time stamp, and ``threads:`` / ``priority:`` only when they are not 1 / 0)."""
    jobs = []
    for block in re.split(r"^\[.*\]$", stdout, flags=re.M):
        rule = re.search(r"^(?:local)?rule (\w+):$", block, re.M)
        if not rule:
            continue
        wildcards = re.search(r"^    wildcards: (.*)$", block, re.M)
        threads = re.search(r"^    threads: (\d+)$", block, re.M)
        priority = re.search(r"^    priority: (-?\d+)$", block, re.M)
        jobs.append(
            {
                "rule": rule.group(1),
                "wildcards": dict(kv.split("=", 1) for kv in wildcards.group(1).split(", ")) if wildcards else {},
                "threads": int(threads.group(1)) if threads else 1,
                "priority": int(priority.group(1)) if priority else 0,
            }
        )
    return jobs


def _declared(stdout: str, key: str = "threads") -> dict[str, set[int]]:
    """What each planned rule's jobs declare as ``key`` (threads or priority)."""
    out: dict[str, set[int]] = {}
    for job in _planned_jobs(stdout):
        out.setdefault(job["rule"], set()).add(job[key])
    return out


@pytest.mark.parametrize("configfile", ["config.yaml", "config/paper.yaml"])
def test_training_dag_plans(snakemake_bin, tmp_path, configfile):
    base = yaml.safe_load((REPO / configfile).read_text())
    overlay = {**base, "results_dir": str(tmp_path / "results"), "logs_dir": str(tmp_path / "logs")}
    r = run_snakemake("-n", "--cores", "2", *TARGETS, overlay=overlay, tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    jobs = job_counts(r.stdout)
    assert jobs["sft_train"] == 2 and jobs["skeleton_rl_train"] == 1 and jobs["skin_rl_train"] == 1
    assert ("tiny_model" in jobs) == (base["model"]["base"] == "tiny")
    # the threads a training job declares (Snakemake hands them to it as OMP_NUM_THREADS): one on CPU, where
    # two training jobs share the 2 cores; two on GPUs, as before
    threads = _declared(r.stdout)
    want = {1} if base["device"] == "cpu" else {2}
    for rule in ("sft_train", "skeleton_rl_train", "skin_rl_train"):
        assert threads[rule] == want, (rule, threads)


def test_default_pipeline_jobs_declare_what_they_use(snakemake_bin, tmp_path):
    """config.yaml on 2 cores (docs/training.md, "Time on CPU"): every job but data_kodcode declares one thread,
    so that evaluations run beside the one-thread trainings and each other; data_kodcode (two threads, the head of
    the DHRCL runs) outranks any two other data jobs together, so it starts first instead of waiting for one-thread
    jobs to leave both cores free."""
    overlay = {"results_dir": str(tmp_path / "results"), "logs_dir": str(tmp_path / "logs")}
    r = run_snakemake("-n", "--cores", "2", overlay=overlay, tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    threads, priority = _declared(r.stdout), _declared(r.stdout, "priority")
    assert {rule for rule, t in threads.items() if t != {1}} == {"data_kodcode"}, threads
    assert {rule for rule in threads if rule.startswith("eval_")} >= {
        "eval_decompile_baseline",
        "eval_decompile_system",
        "eval_codegen",
        "eval_codegen_reference",
    }
    others = max(max(p) for rule, p in priority.items() if rule != "data_kodcode")
    assert min(priority["data_kodcode"]) > 2 * others, priority


def test_checked_headers_declare_their_gcc_workers(snakemake_bin, tmp_path):
    """data_headers declares data.headers.workers threads (0: 4) where a dataset's headers are checked, one
    where they are not."""
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    checked = {name for name, ds in base["datasets"].items() if ds["check_headers"]}
    assert checked and checked != set(base["datasets"])
    for workers, want in ((0, 4), (3, 3)):
        overlay = {
            **base,
            "results_dir": str(tmp_path / "results"),
            "logs_dir": str(tmp_path / "logs"),
            "data": {**base["data"], "headers": {**base["data"]["headers"], "workers": workers}},
        }
        r = run_snakemake("-n", "--cores", "8", "data", overlay=overlay, tmp_path=tmp_path)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        per_dataset = {
            job["wildcards"]["dataset"]: job["threads"]
            for job in _planned_jobs(r.stdout)
            if job["rule"] == "data_headers"
        }
        assert per_dataset == {name: want if name in checked else 1 for name in base["datasets"]}, per_dataset


@pytest.mark.slow
def test_import_skips_training(snakemake_bin, tmp_path):
    """sft.import.skeleton: the run installs the given model, needs no data, and is marked complete."""
    from codegrpo.models import build_tiny_model, load_model

    build_tiny_model(tmp_path / "given", ["int f(int a) { return a; }"] * 30, vocab_size=300)
    overlay = {
        "results_dir": str(tmp_path / "results"),
        "logs_dir": str(tmp_path / "logs"),
        "sft": {"import": {"skeleton": str(tmp_path / "given"), "skin": None}},
    }
    done = tmp_path / "results" / "runs" / "sft_skeleton" / "done.json"
    r = run_snakemake("-c1", str(done), overlay=overlay, tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "data_parquet" not in r.stdout and "tiny_model" not in r.stdout
    rec = json.loads(done.read_text())
    assert rec["imported_from"] == str(tmp_path / "given") and rec["run"] == "sft_skeleton"
    model, _ = load_model(done.parent / "hf")
    assert model.config.vocab_size <= 300


@pytest.mark.slow
def test_cpu_training_chain(cpu_chain):
    """The whole CPU chain: data -> tiny model -> sft_skeleton -> skeleton_rl -> sft_skin -> skin_rl (the session's
    run, tests/conftest.py::cpu_chain, also read by tests/verl/test_cpu.py)."""
    from codegrpo.models import load_model

    cpu_chain.check()
    runs = cpu_chain.runs
    for run in ("sft_skeleton", "skeleton_rl", "sft_skin", "skin_rl"):
        rec = json.loads((runs / run / "done.json").read_text())
        assert rec["final_step"] == 2
        steps = [json.loads(x)["step"] for x in (runs / run / "metrics.jsonl").read_text().splitlines()]
        assert steps == [1, 2], run
        load_model(runs / run / "hf")
    # the chain: each stage started from the previous one's exported model
    assert json.loads((runs / "skeleton_rl" / "done.json").read_text())["init_model"] == str(
        runs / "sft_skeleton" / "hf"
    )
    assert json.loads((runs / "sft_skin" / "done.json").read_text())["init_model"] == str(runs / "skeleton_rl" / "hf")
    last = json.loads((runs / "skin_rl" / "metrics.jsonl").read_text().splitlines()[-1])
    assert "reward/cosine/mean" in last and "actor/kl_loss" in last
    assert any(k.startswith("val-core/sk2decompile_identifier/") for k in last)
    # the tiny tokenizer was trained on the run's own data
    meta = json.loads((cpu_chain.results / "models" / "tiny" / "tiny_model.json").read_text())
    assert meta["n_texts"] > 0


def test_training_jobs_join_the_pipeline_ray(cpu_chain):
    """pipeline_ray: one local Ray for the run (started in onstart, announced in Snakemake's log); both GRPO jobs
    joined it (their workers.json names its GCS port) instead of starting one each; it is gone after the run."""
    import re

    cpu_chain.check()
    started = re.findall(r"pipeline Ray at (127\.0\.0\.1:\d+) \((\d+) training slots?\)", cpu_chain.proc.stderr)
    assert len(started) == 1, cpu_chain.proc.stderr[-3000:]
    address, slots = started[0]
    assert int(slots) == 2  # skeleton_rl_train and skin_rl_train, at most the run's 2 cores
    port = address.rsplit(":", 1)[1]
    for run in ("skeleton_rl", "skin_rl"):  # a Ray of the job's own would have another (random) port
        gcs = json.loads((cpu_chain.runs / run / "workers.json").read_text())["ray"]["gcs_address"]
        assert gcs.rsplit(":", 1)[1] == port, (run, gcs, address)
    alive = subprocess.run(["pgrep", "-f", f"[-]-port={port}( |$)"], capture_output=True, text=True)
    assert alive.stdout.strip() == "", "the pipeline's Ray outlived the run"

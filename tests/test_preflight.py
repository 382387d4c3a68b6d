"""codegrpo.preflight: each kind of problem is found on a real config, named by key with its fix; the
shipped configs pass."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from codegrpo import preflight

from tests.conftest import REPO_ROOT as REPO

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
ONLINE = {"WANDB_MODE": "offline"}


def test_shipped_configs_pass(paper, local):
    env = {"WANDB_MODE": "offline"}
    preflight.plan_checks(local, executor=None, env=env)
    with_partition = copy.deepcopy(paper)
    with_partition["cluster"]["partition"] = "gpu"
    preflight.plan_checks(with_partition, executor="slurm", env=env)


def test_rows_fewer_than_the_batch(paper, tmp_path):
    # the shipped skeleton RL examples (94 rows after the split) against the paper's batch of 128
    rows = 94
    problems = preflight.check_rows(paper, "skeleton_rl", rows, files="train.parquet")
    assert len(problems) == 1
    assert "skeleton_rl.train_batch_size = 128" in problems[0] and "only 94 rows" in problems[0]
    assert "lower skeleton_rl.train_batch_size to at most 94" in problems[0]
    assert preflight.check_rows(paper, "skeleton_rl", 128) == []
    assert "dhrcl.training.train_batch_size" in preflight.check_rows(paper, "dhrcl", 3)[0]


def test_rows_checked_in_the_job_before_the_model_loads(local, tmp_path):
    """run_grpo stops on the row count before it starts the trainer (the model folder does not even exist)."""
    from codegrpo.verl.stages import run_grpo

    cfg = copy.deepcopy(local)
    cfg["skeleton_rl"]["train_batch_size"] = 5
    msgs = [{"role": "user", "content": "x"}]
    df = pd.DataFrame(
        {
            "data_source": ["sk2d_skeleton"] * 3,
            "prompt": [msgs] * 3,
            "reward_model": [{"ground_truth": "int f(void){return 0;}"}] * 3,
        }
    )
    train = tmp_path / "train.parquet"
    df.to_parquet(train)
    with pytest.raises(preflight.PreflightError, match=r"skeleton_rl.train_batch_size = 5 but .* only 3 rows"):
        run_grpo(
            cfg,
            cfg["skeleton_rl"],
            "skeleton_rl",
            train_files=str(train),
            val_files=str(train),
            init_model="nohub/none",
            run_dir=tmp_path / "run",
        )


def test_topology_tensor_parallel_and_batch_split(paper):
    cfg = copy.deepcopy(paper)
    cfg["skin_rl"]["tensor_model_parallel_size"] = 3
    cfg["sft"]["train_batch_size"] = 100
    problems = preflight.check_topology(cfg)
    assert any(
        "skin_rl.tensor_model_parallel_size = 3 does not divide skin_rl.n_gpus_per_node = 8" in p for p in problems
    ), problems
    assert any(
        p.startswith("sft.train_batch_size = 100 does not split over") and "multiple of 8" in p for p in problems
    ), problems
    cfg = copy.deepcopy(paper)
    cfg["skeleton_rl"].update(train_batch_size=5, n=3, ppo_mini_batch_size=5)  # 15 responses over 16 GPUs
    assert any("skeleton_rl.train_batch_size x skeleton_rl.n = 15" in p for p in preflight.check_topology(cfg))
    cfg["device"] = "cpu"
    assert preflight.check_topology(cfg) == []  # CPU runs one process


def test_partition_unset_under_slurm(paper):
    problems = preflight.check_partition(paper, "slurm")
    assert len(problems) == 1 and problems[0].startswith("cluster.partition is unset")
    assert preflight.check_partition(paper, None) == []
    with pytest.raises(preflight.PreflightError, match="cluster.partition"):
        preflight.plan_checks(paper, executor="slurm", env=ONLINE)


def test_models_offline_must_be_local_or_cached(paper, tmp_path):
    cache = tmp_path / "hub"
    env = {"HF_HUB_OFFLINE": "1"}
    problems = preflight.check_offline(paper, env, cache_dir=str(cache), datasets_dir=str(tmp_path / "ds"))
    keys = [p.split(" = ")[0] for p in problems]
    # the models, then the datasets the data stages and the evaluation load from the hub (tests/test_hub.py)
    assert keys == [
        "model.base",
        "dhrcl.models[Qwen3-4B].init",
        "dhrcl.models[Qwen3-8B].init",
        "dhrcl.models[Qwen3-14B].init",
        "dhrcl.reward_model.model",
        "embedding.server_model_path",
        "data.generate.source.hub_id",
        "data.kodcode.source.hub_id",
        "evaluate.codegen.bigcodebench_full.source",
        "evaluate.codegen.bigcodebench_hard.source",
        "evaluate.codegen.livecodebench.source",
        # and the files named by URL (codegrpo.hub.url_sources)
        "evaluate.decompile.data",
        "evaluate.decompile.mbpp.data",
        "evaluate.codegen.humaneval_plus.source",
        "evaluate.codegen.mbpp_plus.source",
    ]
    paper = copy.deepcopy(paper)  # from here on: models only
    paper["evaluate"]["decompile"]["mbpp"]["enabled"] = False
    paper["evaluate"]["decompile"]["data"] = "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"
    paper["data"]["sk2d_inputs"] = "examples"
    paper["data"]["kodcode"]["source"]["hub_id"] = None
    paper["evaluate"]["codegen"]["benchmarks"] = ["kodcode_heldout", "humaneval"]
    assert "huggingface-cli download LLM4Binary/llm4decompile-6.7b-v2" in problems[0]
    # the same ids in the cache layout huggingface_hub writes: found
    for repo in (
        "LLM4Binary/llm4decompile-6.7b-v2",
        "Qwen/Qwen3-4B",
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-14B",
        "TIGER-Lab/AceCodeRM-7B",
        "Qwen/Qwen3-Embedding-0.6B",
    ):
        folder = cache / ("models--" + repo.replace("/", "--"))
        (folder / "snapshots" / "abc").mkdir(parents=True)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text("abc")
        (folder / "snapshots" / "abc" / "config.json").write_text("{}")
    assert preflight.check_offline(paper, env, cache_dir=str(cache)) == []
    # a local folder is fine offline; online nothing is checked
    cfg = copy.deepcopy(paper)
    cfg["model"]["base"] = str(tmp_path)
    assert [p.split(" = ")[0] for p in preflight.check_offline(cfg, env, cache_dir=str(tmp_path / "x"))] == [
        "dhrcl.models[Qwen3-4B].init",
        "dhrcl.models[Qwen3-8B].init",
        "dhrcl.models[Qwen3-14B].init",
        "dhrcl.reward_model.model",
        "embedding.server_model_path",
    ]
    assert preflight.check_offline(paper, {}, cache_dir=str(tmp_path / "x")) == []
    # a job's config holds only its sections (rules/common.smk, training_cfg: device, seed, cluster, model + the
    # stage's): the SFT job checks the base model it loads and does not trip over the sections it lacks
    job = {k: paper[k] for k in ("device", "seed", "cluster", "model", "sft")}
    assert [p.split(" = ")[0] for p in preflight.check_offline(job, env, cache_dir=str(tmp_path / "x"))] == [
        "model.base"
    ]
    rows = int(paper["sft"]["train_batch_size"])
    with pytest.raises(preflight.PreflightError) as exc:  # the job's own checks run on its partial config
        preflight.stage_checks(job, "sft", rows=rows, model_dir=tmp_path, env={**env, "WANDB_MODE": "offline"})
    assert [p.split(" = ")[0] for p in exc.value.problems] == ["model.base"]
    preflight.stage_checks(job, "sft", rows=rows, model_dir=tmp_path, env={"WANDB_MODE": "offline"})


def test_wandb_logger_needs_key_or_mode(paper, local):
    problems = preflight.check_wandb(paper, {})
    assert [p.split(" ")[0] for p in problems] == [
        "sft.logger",
        "skeleton_rl.logger",
        "skin_rl.logger",
        "dhrcl.training.logger",
    ]
    assert "WANDB_API_KEY" in problems[0] and "WANDB_MODE=offline" in problems[0]
    assert preflight.check_wandb(paper, {"WANDB_API_KEY": "k"}) == []
    assert preflight.check_wandb(paper, {"WANDB_MODE": "disabled"}) == []
    assert preflight.check_wandb(local, {}) == []  # console only


def test_lengths_over_the_model_positions(paper, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 2048}))
    problems = preflight.check_lengths(paper, "skeleton_rl", tmp_path)
    assert len(problems) == 1
    assert "skeleton_rl.max_prompt_length + skeleton_rl.max_response_length = 3072 exceeds the 2048" in problems[0]
    assert preflight.check_lengths(paper, "sft", tmp_path) == []  # max_length 2048 fits
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 16384}))
    assert preflight.check_lengths(paper, "dhrcl", tmp_path) == []


@pytest.mark.slow
def test_plan_time_topology_error_stops_the_dry_run(tmp_path):
    override = tmp_path / "bad.yaml"
    override.write_text("skin_rl: {tensor_model_parallel_size: 3}\n")
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "--configfile", "config/paper.yaml", str(override)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    assert proc.returncode != 0
    assert "skin_rl.tensor_model_parallel_size = 3 does not divide" in proc.stdout + proc.stderr


def _fake_slurm(tmp_path, sinfo: str = ""):
    """Recording stand-ins of the SLURM commands (sinfo prints ``sinfo``); the file of calls made."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "slurm-calls"
    for tool in ("sbatch", "sacct", "squeue", "scancel"):
        (fake / tool).write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {calls}\necho 'Submitted batch job 1'\n")
    (fake / "sinfo").write_text(f"#!/bin/sh\nprintf '{sinfo}'\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "WANDB_MODE": "offline"}, calls


def _smoke_under_slurm(env, *extra):
    return subprocess.run(
        [
            SNAKEMAKE,
            "smoke",
            "--executor",
            "slurm",
            "--jobs",
            "1",
            "--nolock",
            "--configfile",
            "config/paper.yaml",
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.slow
def test_preflight_runs_for_a_named_target_before_anything_is_submitted(tmp_path):
    """`snakemake smoke` under SLURM with no partition: the preflight stops the run before the first sbatch
    (it used to run only for the target `all`, and smoke went straight to sbatch)."""
    env, calls = _fake_slurm(tmp_path)
    proc = _smoke_under_slurm(env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "cluster.partition" in out, out[-3000:]
    assert not calls.exists(), calls.read_text()


@pytest.mark.slow
def test_preflight_refuses_a_job_no_node_can_hold(tmp_path):
    """The smoke job's 120 GB against the only node's 2 GB (what sinfo reports): refused before sbatch."""
    env, calls = _fake_slurm(tmp_path, sinfo="debug*|n1|4|2000|(null)\\n")
    env = {k: v for k, v in env.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    site = tmp_path / "site.yaml"
    site.write_text("cluster: {partition: debug}\nhub: {offline_jobs: false}\n")
    proc = _smoke_under_slurm(env, str(site))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "rule smoke asks for 16 CPUs per node" in out, out[-3000:]
    assert "120000 MB per node (the largest node of partition 'debug' has 2000 MB" in out, out[-3000:]
    assert not calls.exists(), calls.read_text()


def test_verl_version_is_checked_before_a_job_starts(tmp_path, monkeypatch):
    """The adapter is written for verl 0.4.1; another version (0.9 ignores the reward keys it writes) is refused
    by the job's preflight, naming the version to install."""
    from codegrpo import verl as adapter

    assert adapter.installed_verl_version() == adapter.VERL_VERSION == "0.4.1"
    assert preflight.check_verl_version() == []
    (problem,) = preflight.check_verl_version("0.9.0")
    assert "verl 0.9.0 is installed" in problem and "verl==0.4.1" in problem
    assert "not installed" in preflight.check_verl_version("")[0]
    # the job's checks (stage_checks, run before the model loads) refuse an environment with the wrong verl
    monkeypatch.setattr(adapter, "installed_verl_version", lambda: "0.9.0")
    cfg = {
        "device": "cpu",
        "cluster": {},
        "dhrcl": {
            "training": {"train_batch_size": 4, "logger": ["console"], "max_prompt_length": 8, "max_response_length": 8}
        },
    }
    with pytest.raises(preflight.PreflightError, match="verl==0.4.1"):
        preflight.stage_checks(cfg, "dhrcl", rows=8, model_dir=tmp_path, env={})

"""codegrpo.smoke_checks on CPU: the embedding server up and down for real, the sandbox's isolation, the GRPO and
evaluation checks' glue (a GPU check fails at once without a GPU, composes a one-GPU vLLM run, runs in verl's CPU
mode)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from codegrpo import smoke, smoke_checks
from codegrpo.config import load_config
from codegrpo.smoke import Check

from tests.conftest import REPO_ROOT as REPO


def test_embedding_server_up_and_down_on_cpu(local, tmp_path):
    """The real check with the CPU configuration: the project's server over the packaged MiniLM starts, embeds
    through /v1/embeddings and stops, leaving no process and no open port."""
    section = dict(local["embedding"])
    res = smoke.run_check(
        Check(
            "embedding_server",
            "codegrpo.smoke_checks:check_embedding_server",
            {"section": section, "log_path": str(tmp_path / "embed.log")},
            300,
        ),
        tmp_path,
    )
    assert res.status == "ok", (res.error, res.detail)
    assert res.detail["dim"] == 384 and res.detail["stopped"] is True
    assert 0.3 < res.detail["cosine"] < 0.9  # related identifiers, not the same text
    assert (tmp_path / "embed.log").read_text().strip()


def test_grpo_check_without_a_gpu_fails_at_once(local, tmp_path):
    kwargs = {
        "cfg": {k: local[k] for k in smoke_checks.GRPO_SECTIONS},
        "smoke": local["smoke"],
        "train": "t",
        "val": "v",
        "model_dir": str(tmp_path),
        "run_dir": str(tmp_path / "run"),
    }
    res = smoke.run_check(Check("grpo_vllm", "codegrpo.smoke_checks:check_grpo", kwargs, 120), tmp_path)
    assert res.status == "failed" and res.error.startswith("RuntimeError: no CUDA device visible to torch")
    assert res.seconds < 60 and not (tmp_path / "run").exists()


def test_grpo_check_composes_a_one_gpu_vllm_run(paper, local, tmp_path):
    """The GRPO check's verl launch (no GPU needed to build it): vLLM rollout, one GPU, 2 steps, and Hydra
    accepts it against verl 0.4.1's config."""
    from codegrpo.verl.launch import grpo_launch

    cfg = smoke_checks.smoke_grpo_config(paper, paper["smoke"])
    s = cfg["skeleton_rl"]
    assert (s["rollout_name"], s["nnodes"], s["n_gpus_per_node"], s["total_training_steps"]) == ("vllm", 1, 1, 2)
    assert paper["skeleton_rl"]["nnodes"] == 2  # the paper's own section is untouched
    la = grpo_launch(
        cfg,
        s,
        "smoke_grpo",
        train_files=tmp_path / "t.parquet",
        val_files=tmp_path / "v.parquet",
        model_path=str(tmp_path / "tiny"),
        run_dir=tmp_path / "run",
    )
    composed = la.validate()
    assert composed.actor_rollout_ref.rollout.name == "vllm"
    assert composed.trainer.n_gpus_per_node == 1 and composed.trainer.total_training_steps == 2
    assert composed.actor_rollout_ref.rollout.gpu_memory_utilization == pytest.approx(0.3)
    # also from the CPU configuration: the check is of the GPU path (CPU mode would swap the rollout for hf)
    assert smoke_checks.smoke_grpo_config(local, local["smoke"])["device"] == "gpu" and local["device"] == "cpu"


def test_eval_batch_check_glue_on_cpu(paper, tmp_path):
    """The evaluation check's own code (tasks, scoring, result) with the transformers backend in place of vLLM,
    on a tiny model built by the tiny_model check's function: only the generation backend differs on a GPU."""
    from codegrpo.models import build_tiny_model

    corpus = ["int func0(int var1) { return var1 + 1; }", "for (int i = 0; i < n; i++) sum += a[i];"] * 20
    model = build_tiny_model(tmp_path / "tiny", corpus, arch="qwen2", vocab_size=400, seed=0, hidden_size=64)
    # the paper config names the reference's file by URL: the batch reads the shipped legacy file then
    assert paper["evaluate"]["decompile"]["data"].startswith("https://")
    data = str(REPO / smoke.decompile_data(paper))
    assert data.endswith(smoke.LEGACY_DECOMPILE_DATA)
    res = smoke.run_check(
        Check(
            "eval_cpu",
            "codegrpo.smoke_checks:check_eval_batch",
            {
                "model_dir": str(model),
                "data": data,
                "out_path": str(tmp_path / "eval.json"),
                "batch_size": 2,
                "max_new_tokens": 8,
                "backend": "transformers",
                "workers": 1,
            },
            600,
        ),
        tmp_path,
    )
    assert res.status == "ok", (res.error, res.detail)
    assert res.detail["tasks"] == 2 and res.detail["backend"] == "transformers"
    result = json.loads((tmp_path / "eval.json").read_text())
    assert [r["opt"] for r in result["records"]] == ["O0", "O0"]


@pytest.mark.slow
def test_grpo_check_glue_in_verl_cpu_mode(local, tmp_path):
    """The GRPO check's own code (config, run_grpo, metrics, checkpoint) through verl's CPU mode on the toy task
    (its rollout is transformers there, not vLLM): on a GPU only the rollout and the device differ."""
    made = smoke_checks.check_tiny_model(str(tmp_path / "tiny"), str(tmp_path / "toy"), hidden_size=64, vocab_size=512)
    files, model = {"train": made["train"], "val": made["val"]}, made["model_dir"]
    smoke_cfg = copy.deepcopy(local["smoke"])
    smoke_cfg["grpo"].update({"max_prompt_length": 64, "max_response_length": 8})
    kwargs = {
        "cfg": {k: local[k] for k in smoke_checks.GRPO_SECTIONS},
        "smoke": smoke_cfg,
        "train": str(files["train"]),
        "val": str(files["val"]),
        "model_dir": str(model),
        "run_dir": str(tmp_path / "grpo"),
        "device": "cpu",
    }
    res = smoke.run_check(Check("grpo_cpu", "codegrpo.smoke_checks:check_grpo", kwargs, 900), tmp_path)
    assert res.status == "ok", (res.error, res.detail.get("traceback", "")[-2000:])
    assert res.detail["steps"] == 2 and Path(res.detail["hf"], "config.json").is_file()
    assert any(k.startswith("critic/score") for k in res.detail["last_step"])


def test_sandbox_check_says_which_isolation_runs():
    got = smoke_checks.check_sandbox({})
    assert got["mechanism"] in ("bwrap", "rlimits") and isinstance(got["private_uid"], bool) and got["reason"]
    assert got["require_namespaces"] is False


def test_required_namespaces_refuse_a_sandbox_without_them(monkeypatch):
    """sandbox.require_namespaces (paper config): without bwrap's namespaces the smoke check fails and no sandbox
    starts, naming the key; without the requirement the fallback runs and the check says so."""
    from codegrpo.sandbox import bwrap
    from codegrpo.sandbox.client import make_sandbox
    from codegrpo.sandbox.types import SandboxError

    monkeypatch.setattr(bwrap, "_INFO", None)  # detect again, forced to the fallback (as where bwrap is missing)
    monkeypatch.setenv("CODEGRPO_SANDBOX_MECHANISM", "rlimits")
    with pytest.raises(SandboxError, match=r"sandbox\.require_namespaces is true.*rlimits only"):
        smoke_checks.check_sandbox({"require_namespaces": True})
    with pytest.raises(SandboxError, match=r"apt-get install bubblewrap"):
        make_sandbox(1, {"require_namespaces": True})
    assert smoke_checks.check_sandbox({"require_namespaces": False})["mechanism"] == "rlimits"
    assert load_config(REPO / "config" / "paper.yaml", check_files=False)["sandbox"]["require_namespaces"] is True

"""The plan's jobs (codegrpo.budget.plan): rows, steps, checkpoints on disk, memory and GPU-hours of the paper plan,
and the refusals on hand-checkable configs, each naming the number and the key."""

import copy
from pathlib import Path

import pytest

from codegrpo import budget, preflight

from tests.budget.conftest import paper_with as _cfg


def test_paper_dhrcl_plan_reaches_500_steps(paper_cfg, tmp_path):
    b = budget.build_budget(_cfg(paper_cfg, tmp_path))
    dh = [j for j in b["jobs"] if j["stage"] == "dhrcl"]
    seeds = len(paper_cfg["dhrcl"]["seeds"])
    assert len(dh) == (len(paper_cfg["dhrcl"]["runs"]) + 2 + 2) * seeds  # 8B: every variant; 4B, 14B: two
    for j in dh:
        assert (j["rows"], j["batches_per_epoch"], j["epochs"], j["total_steps"], j["reachable"]) == (
            9000,
            70,
            8,
            500,
            True,
        ), j
    full = next(j for j in dh if j["run"] == "dhrcl-Qwen3-8B-full-seed0")
    assert full["curriculum"]["stage2_by_step"] == 150 and full["curriculum"]["stage3_by_step"] == 300
    fixed = next(j for j in dh if j["run"] == "dhrcl-Qwen3-8B-fixed_schedule-seed0")
    assert fixed["curriculum"]["kind"] == "fixed" and fixed["curriculum"]["stage3_by_step"] == 300
    assert b["problems"] == []


def test_rows_come_from_the_parquet_file_once_built(paper_cfg, tmp_path):
    import pandas as pd

    cfg = _cfg(paper_cfg, tmp_path)
    path = Path(cfg["results_dir"]) / "data" / "kodcode" / "train.parquet"
    path.parent.mkdir(parents=True)
    pd.DataFrame({"x": range(300)}).to_parquet(path)
    j = next(j for j in budget.plan_jobs(cfg) if j["stage"] == "dhrcl")
    assert (j["rows"], j["rows_source"], j["batches_per_epoch"], j["epochs"]) == (300, str(path), 2, 250)


def test_data_that_fills_no_batch_is_refused_with_the_number_and_key(paper_cfg, tmp_path):
    cfg = _cfg(paper_cfg, tmp_path, **{"budget.expected_rows.dhrcl": 100})
    problems = budget.build_budget(cfg)["problems"]
    assert any("100 training rows" in p and "dhrcl.training.train_batch_size = 128" in p for p in problems), problems
    with pytest.raises(preflight.PreflightError, match="dhrcl.training.train_batch_size"):
        preflight.plan_checks(cfg, env={"WANDB_MODE": "offline"})


def test_every_paper_rl_stage_keeps_a_bounded_number_of_checkpoints(paper_cfg, tmp_path):
    for section in (paper_cfg["skeleton_rl"], paper_cfg["skin_rl"], paper_cfg["dhrcl"]["training"]):
        assert section["max_checkpoints_to_keep"] == 2
    b = budget.build_budget(_cfg(paper_cfg, tmp_path))
    for j in b["jobs"]:
        if j["kind"] == "rl":
            assert j["checkpoints_kept"] == 2 and j["saves"] > 2
    full = next(j for j in b["jobs"] if j["run"] == "dhrcl-Qwen3-8B-full-seed0")
    # Qwen3-8B: 12 bytes/param (fp32 shards + Adam moments) x 8.19e9 = 98.3 GB; 2 kept + the 2-byte export
    assert full["checkpoint_gb"] == pytest.approx(12 * 8.19073536, rel=1e-6)
    assert full["disk_gb"] == pytest.approx(2 * 12 * 8.19073536 + 2 * 8.19073536, rel=1e-6)


def test_grpo_launch_passes_retention_to_verl(paper_cfg, tmp_path):
    from codegrpo.verl.launch import grpo_launch

    s = dict(paper_cfg["skeleton_rl"], temperature=1.0)
    launch = grpo_launch(
        paper_cfg, s, "skeleton_rl", train_files="t.parquet", val_files="v.parquet", model_path="m", run_dir=tmp_path
    )
    assert "trainer.max_actor_ckpt_to_keep=2" in launch.overrides
    assert "trainer.max_critic_ckpt_to_keep=2" in launch.overrides


def test_disk_over_the_scratch_quota_is_refused(paper_cfg, tmp_path):
    cfg = _cfg(paper_cfg, tmp_path, **{"cluster.scratch_quota": 1000})
    b = budget.build_budget(cfg)
    assert b["totals"]["disk_gb"] > 1000
    assert any("cluster.scratch_quota = 1000" in p and "max_checkpoints_to_keep" in p for p in b["problems"])


def test_memory_over_the_gpu_is_refused_naming_the_key(paper_cfg, tmp_path):
    cfg = _cfg(paper_cfg, tmp_path, **{"skeleton_rl.gradient_checkpointing": False, "cluster.gpu_memory_gb": 40})
    problems = budget.build_budget(cfg)["problems"]
    msg = next(p for p in problems if p.startswith("skeleton_rl:"))
    assert "exceeds the GPU's 40 GB (cluster.gpu_memory_gb)" in msg
    assert "set skeleton_rl.gradient_checkpointing: true" in msg
    with pytest.raises(preflight.PreflightError, match="skeleton_rl.gradient_checkpointing"):
        preflight.plan_checks(cfg, env={"WANDB_MODE": "offline"})


def test_paper_rl_stages_fit_80_gb_and_would_not_without_gradient_checkpointing(paper_cfg, tmp_path):
    b = budget.build_budget(_cfg(paper_cfg, tmp_path))
    for j in b["jobs"]:
        assert j["memory"]["fits"] is True, j["run"]
    sk = next(j for j in b["jobs"] if j["run"] == "skeleton_rl")["memory"]
    assert sk["gradient_checkpointing"] and sk["activations_other_setting_gb"] > 50
    # the embedding server shares a GPU with skin_rl's rollout engine: the recipe's 0.8 does not fit 80 GB
    cfg = _cfg(paper_cfg, tmp_path, **{"skin_rl.gpu_memory_utilization": 0.8})
    assert any(
        p.startswith("skin_rl:") and "skin_rl.gpu_memory_utilization" in p for p in budget.build_budget(cfg)["problems"]
    )


def test_reward_model_server_memory_is_counted_on_its_gpu(paper_cfg, tmp_path):
    """baseline_acecoder's scoring server (AceCodeRM-7B, bf16, no lm_head) holds memory on a training GPU."""
    b = budget.build_budget(_cfg(paper_cfg, tmp_path))
    ace = next(j for j in b["jobs"] if j["run"] == "dhrcl-Qwen3-8B-baseline_acecoder-seed0")
    full = next(j for j in b["jobs"] if j["run"] == "dhrcl-Qwen3-8B-full-seed0")
    spec = budget.KNOWN_MODELS["TIGER-Lab/AceCodeRM-7B"]
    rm = ace["reward_model"]
    assert rm["weights_gb"] == pytest.approx(2 * (spec.params - 152064 * 3584) / 1e9)  # ~14.1 GB
    assert rm["activations_gb"] == pytest.approx(4 * 6144 * (4 * 3584 + 3 * 18944) * 2 / 1e9)
    assert rm["peak_gb"] == pytest.approx(rm["weights_gb"] + rm["activations_gb"] + 1.0)
    assert ace["memory"]["overhead_gb"] == pytest.approx(full["memory"]["overhead_gb"] + rm["peak_gb"])
    assert "reward_model" not in full and ace["memory"]["fits"] is True
    # the runs' own training overrides (a smaller rollout share, half log-prob micro-batches) make it fit
    assert ace["memory"]["rollout_engine_gb"] == pytest.approx(0.4 * 80)
    cfg = _cfg(paper_cfg, tmp_path)
    cfg["dhrcl"]["reward_model"] = {**cfg["dhrcl"]["reward_model"], "training": {}}
    problems = budget.build_budget(cfg)["problems"]
    assert any(p.startswith("dhrcl-Qwen3-8B-baseline_acecoder-seed0:") for p in problems), problems
    cfg["dhrcl"]["reward_model"]["gpu_memory_gb"] = 0.0  # a server that held nothing would fit
    assert not any("baseline_acecoder" in p for p in budget.build_budget(cfg)["problems"])


def test_each_model_size_has_its_own_run_folders(paper_cfg, tmp_path):
    """Qwen3-4B / 8B / 14B: the model is in the run name, so a second size never shares a folder with the first;
    each size's runs get its init and its training overrides."""
    from codegrpo.verl.dhrcl import model_cfg, plan_runs

    runs = plan_runs(paper_cfg)
    assert {r["model"] for r in runs.values()} == {"Qwen3-4B", "Qwen3-8B", "Qwen3-14B"}
    assert {"dhrcl-Qwen3-4B-full-seed0", "dhrcl-Qwen3-8B-full-seed0", "dhrcl-Qwen3-14B-full-seed0"} <= set(runs)
    assert runs["dhrcl-Qwen3-14B-full-seed2"] == {
        "variant": "full",
        "seed": 2,
        "model": "Qwen3-14B",
        "init": "Qwen/Qwen3-14B",
    }
    big = model_cfg(paper_cfg, "Qwen3-14B")["dhrcl"]
    assert big["init"] == "Qwen/Qwen3-14B" and big["training"]["tensor_model_parallel_size"] == 4
    assert big["training"]["total_training_steps"] == 500  # the rest is dhrcl.training's
    assert paper_cfg["dhrcl"]["training"]["tensor_model_parallel_size"] == 2
    # without a model list: one model, run names as before
    cfg = copy.deepcopy(paper_cfg)
    cfg["dhrcl"]["models"] = []
    assert set(plan_runs(cfg)) == {f"dhrcl-{v}-seed{s}" for v in cfg["dhrcl"]["runs"] for s in cfg["dhrcl"]["seeds"]}
    cfg["dhrcl"]["models"] = [{"name": "a", "init": "x", "training": {"tensor_parallel": 2}}]
    with pytest.raises(ValueError, match=r"dhrcl.models\[0\] \(a\).training: unknown key"):
        plan_runs(cfg)


def test_a_model_sizes_topology_is_checked_under_its_own_key(paper_cfg):
    cfg = copy.deepcopy(paper_cfg)
    cfg["dhrcl"]["models"][2]["training"]["tensor_model_parallel_size"] = 3
    problems = preflight.check_topology(cfg)
    assert any(p.startswith("dhrcl.models[Qwen3-14B].training.tensor_model_parallel_size = 3") for p in problems)
    assert preflight.check_topology(paper_cfg) == []


def test_resume_prunes_the_previous_attempts_checkpoints(tmp_path):
    """verl rotates only what the running process wrote: a resumed run (with retention) keeps just the checkpoint
    it resumes from, removing older ones and an incomplete newer save of the killed attempt."""
    from codegrpo.verl import checkpoints

    ckpt = tmp_path / "checkpoints"
    for step in (25, 50, 75):
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    (ckpt / checkpoints.LATEST_FILE).write_text("50")
    assert checkpoints.prune_for_resume(ckpt) == [25, 75]
    assert list(checkpoints.step_dirs(ckpt)) == [50] and checkpoints.latest_step(ckpt) == 50


def test_evaluation_gpu_hours_by_hand(paper):
    """A run's code-generation job: problems x samples x max_new_tokens generated after prompts of
    max_prompt_tokens, at 2 Psi FLOPs per token and the rollout MFU; a decompilation system with a skin model
    runs two phases on 164 x 4 tasks of each enabled benchmark."""
    cfg = copy.deepcopy(paper)
    gen = cfg["evaluate"]["codegen"]
    gen.update(benchmarks=["humaneval", "bigcodebench_hard"], n_samples=2, max_new_tokens=100, limit=None)
    cfg["evaluate"]["max_prompt_tokens"] = 50
    generated, prompts = budget.codegen_tokens(cfg, gen)
    assert (generated, prompts) == ((164 + 148) * 2 * 100, (164 + 148) * 2 * 50)
    # evaluate.codegen.limit caps each benchmark's problems
    assert budget.codegen_tokens(cfg, dict(gen, limit=150))[0] == (150 + 148) * 2 * 100
    spec = budget.KNOWN_MODELS["Qwen/Qwen3-8B"]
    peak = budget.gpu_peak_tflops(cfg) * 1e12
    want = 2 * spec.params * (generated + prompts) / (budget.THROUGHPUT.rollout_mfu * peak) / 3600
    assert budget.eval_gpu_hours(spec, generated, prompts, cfg) == pytest.approx(want)
    jobs = {e["job"]: e for e in budget.plan_eval_jobs(cfg)}
    assert jobs["eval_codegen dhrcl-Qwen3-8B-full-seed0"]["gpu_hours"] == pytest.approx(want)
    full = jobs["eval_decompile_system full"]  # skeleton + skin, HumanEval- and MBPP-Decompile
    assert full["generated_tokens"] == 164 * 4 * 2 * 2 * cfg["evaluate"]["decompile"]["max_new_tokens"]
    b = budget.build_budget(cfg, use_files=False)
    assert b["totals"]["eval_gpu_hours"] == pytest.approx(sum(e["gpu_hours"] for e in b["eval_jobs"]))

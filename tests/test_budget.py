"""The plan-time budget (codegrpo.budget): step arithmetic against torch's data loaders and verl's loop, the memory
model against the published figures it cites, disk and refusals on hand-checkable configs, the paper plan."""

import copy
import dataclasses
import json
import math
from pathlib import Path

import pytest

from codegrpo import budget, preflight
from codegrpo.config import load_config

from tests.conftest import REPO_ROOT as ROOT


@pytest.fixture(scope="module")
def paper_cfg():
    return load_config(ROOT / "config" / "paper.yaml", check_files=False)


def _cfg(paper_cfg, tmp_path, **changes):
    """The paper config with no data built (results under tmp_path) and ``changes`` (dotted keys) applied."""
    cfg = copy.deepcopy(paper_cfg)
    cfg["results_dir"] = str(tmp_path / "results")
    for key, value in changes.items():
        node = cfg
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    return cfg


# ---------------------------------------------------------------------------------------------------- steps


@pytest.mark.parametrize("rows,bs", [(10, 4), (8, 4), (3, 4), (9000, 128), (129, 128)])
def test_rl_batches_per_epoch_is_torchs_drop_last_loader(rows, bs):
    from torch.utils.data import DataLoader

    assert budget.rl_batches_per_epoch(rows, bs) == len(DataLoader(range(rows), batch_size=bs, drop_last=True))


@pytest.mark.parametrize("rows,bs,world", [(10, 4, 2), (9, 4, 2), (7, 8, 4), (1000, 512, 8), (99000, 512, 8)])
def test_sft_batches_per_epoch_is_verls_distributed_loader(rows, bs, world):
    """verl's SFT trainer: DistributedSampler(drop_last=True) per rank, batches of bs // world, drop_last."""
    from torch.utils.data import DataLoader, DistributedSampler

    lengths = {len(DataLoader(range(rows), batch_size=bs // world, drop_last=True,
                              sampler=DistributedSampler(range(rows), num_replicas=world, rank=r, drop_last=True)))
               for r in range(world)}
    assert lengths == {budget.sft_batches_per_epoch(rows, bs, world)}


def test_step_arithmetic_by_hand():
    s = {"train_batch_size": 4, "total_epochs": 1, "total_training_steps": 5}
    plan = budget.step_plan(s, 10, kind="rl")  # 10 // 4 = 2 batches per epoch; ceil(5 / 2) = 3 epochs
    assert (plan["batches_per_epoch"], plan["epochs"], plan["total_steps"], plan["reachable"]) == (2, 3, 5, True)
    plan = budget.step_plan({**s, "total_training_steps": None, "total_epochs": 2}, 10, kind="rl")
    assert (plan["epochs"], plan["total_steps"]) == (2, 4)
    plan = budget.step_plan({**s, "total_epochs": 7}, 10, kind="rl")  # never fewer epochs than configured
    assert plan["epochs"] == 7 and plan["total_steps"] == 5
    plan = budget.step_plan(s, 3, kind="rl")
    assert plan["batches_per_epoch"] == 0 and plan["reachable"] is False
    assert budget.saves(500, 25) == 20 and budget.saves(501, 25) == 21 and budget.saves(4, 2) == 2


def test_verl_loop_reaches_the_step_budget_with_the_derived_epochs():
    """verl 0.4.1's fit loop, reduced to its step counting: ``for epoch in range(total_epochs): for batch in
    loader: is_last_step = step >= total; ...; if is_last_step: return; step += 1``."""
    from torch.utils.data import DataLoader

    def last_step(rows, bs, epochs, total):
        step = 1
        for _ in range(epochs):
            for _ in DataLoader(range(rows), batch_size=bs, drop_last=True):
                if step >= total:
                    return step, True
                step += 1
        return step - 1, False

    s = {"train_batch_size": 128, "total_epochs": 1, "total_training_steps": 500}
    assert last_step(9000, 128, 1, 500) == (70, False)  # the paper plan as it was: 70 of 500 steps, no last step
    plan = budget.step_plan(s, 9000, kind="rl")
    assert last_step(9000, 128, plan["epochs"], 500) == (500, True)


def test_paper_dhrcl_plan_reaches_500_steps(paper_cfg, tmp_path):
    b = budget.build_budget(_cfg(paper_cfg, tmp_path))
    dh = [j for j in b["jobs"] if j["stage"] == "dhrcl"]
    seeds = len(paper_cfg["dhrcl"]["seeds"])
    assert len(dh) == (len(paper_cfg["dhrcl"]["runs"]) + 2 + 2) * seeds  # 8B: every variant; 4B, 14B: two
    for j in dh:
        assert (j["rows"], j["batches_per_epoch"], j["epochs"], j["total_steps"], j["reachable"]) == (
            9000, 70, 8, 500, True), j
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


def test_launch_time_epochs_override():
    from codegrpo.verl.stages import TrainingInputError, epochs_override

    cfg = {"device": "gpu"}
    s = {"train_batch_size": 128, "total_epochs": 1, "total_training_steps": 500, "nnodes": 1, "n_gpus_per_node": 8}
    assert epochs_override(cfg, s, 9000, kind="rl") == "trainer.total_epochs=8"
    with pytest.raises(TrainingInputError, match="fill no batch"):
        epochs_override(cfg, s, 100, kind="rl")


def test_trainer_raises_total_epochs_on_the_composed_verl_config():
    from codegrpo.verl.launch import compose
    from codegrpo.verl.trainer import ensure_epochs

    cfg = compose("grpo", ["trainer.total_epochs=1", "trainer.total_training_steps=500"])
    assert ensure_epochs(cfg, 70) == 8 and cfg.trainer.total_epochs == 8
    cfg = compose("grpo", ["trainer.total_epochs=2", "trainer.total_training_steps=null"])
    assert ensure_epochs(cfg, 70) == 2 and cfg.trainer.total_epochs == 2


# ---------------------------------------------------------------------------------------------------- checkpoints


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
    launch = grpo_launch(paper_cfg, s, "skeleton_rl", train_files="t.parquet", val_files="v.parquet",
                         model_path="m", run_dir=tmp_path)
    assert "trainer.max_actor_ckpt_to_keep=2" in launch.overrides
    assert "trainer.max_critic_ckpt_to_keep=2" in launch.overrides


def test_disk_over_the_scratch_quota_is_refused(paper_cfg, tmp_path):
    cfg = _cfg(paper_cfg, tmp_path, **{"cluster.scratch_quota": 1000})
    b = budget.build_budget(cfg)
    assert b["totals"]["disk_gb"] > 1000
    assert any("cluster.scratch_quota = 1000" in p and "max_checkpoints_to_keep" in p for p in b["problems"])


# ---------------------------------------------------------------------------------------------------- memory


def test_state_memory_is_zeros_16_bytes_per_parameter():
    """ZeRO (Rajbhandari et al. 2020) §3.1: mixed-precision Adam needs 16Ψ bytes, e.g. 24 GB for the 1.5B GPT-2;
    Fig. 1: a 7.5B model with P_os+g+p over N_d = 64 GPUs holds 1.9 GB of model states per GPU."""
    assert budget.MEMORY.state_bytes_per_param == 16
    assert budget.state_bytes(1.5e9, 1) / budget.GB == pytest.approx(24.0)
    assert budget.state_bytes(7.5e9, 64) / budget.GB == pytest.approx(1.875)
    assert budget.state_bytes(1e9, 1, param_offload=True, optimizer_offload=True) / budget.GB == pytest.approx(4.0)


def test_activation_memory_has_korthikantis_form():
    """Korthikanti et al. 2022, Eq. (1): c s b h bytes per layer (c = 34 for a GPT layer with flash attention, no
    score matrix); full recomputation keeps 2 s b h per layer (§4) plus one layer's full activations."""
    spec = budget.KNOWN_MODELS["LLM4Binary/llm4decompile-6.7b-v2"]
    s, b, h, L = 3072, 4, 4096, 32
    gpt = dataclasses.replace(budget.MEMORY, act_sbh_per_layer=34.0)
    assert budget.activation_bytes(spec, s * b, recompute=False, mem=gpt) == L * 34 * s * b * h
    assert budget.activation_bytes(spec, s * b, recompute=True, mem=gpt) == L * 2 * s * b * h + 34 * s * b * h


MEASURED = json.loads((ROOT / "docs" / "measurements" / "gpu_memory_probe_h200.json").read_text())


@pytest.mark.parametrize("shape,hub_id", [("llama-6.7b", "LLM4Binary/llm4decompile-6.7b-v2"),
                                          ("qwen3-8b", "Qwen/Qwen3-8B")])
def test_memory_model_covers_what_a_gpu_measured(shape, hub_id):
    """The model's constants against benchmarks/gpu_memory_probe.py on one H200 (bf16, SDPA): per-layer
    activations at or above the measured ones (with and without recomputation), logits at or above the measured
    head, the activation estimate of the paper's micro-batch within 20 % above the measurement, and the training
    MFU no more optimistic than one GPU without communication reached."""
    spec = budget.KNOWN_MODELS[hub_id]
    m = MEASURED["shapes"][shape]
    assert m["shape"]["hidden_size"] == spec.hidden and m["shape"]["vocab_size"] == spec.vocab
    for row in m["settings"]:
        tokens = row["micro_batch"] * row["seq"]
        per_layer = budget.MEMORY.act_sbh_per_layer_recompute if row["grad_ckpt"] else budget.MEMORY.act_sbh_per_layer
        assert per_layer * spec.hidden * tokens >= row["per_layer_saved"]
        assert budget.MEMORY.logits_bytes_per_element * spec.vocab * tokens >= row["head_saved"]
        if not row["grad_ckpt"] and row["seq"] == 3072 and row["micro_batch"] == 4:
            est = budget.activation_bytes(spec, tokens, recompute=False)
            assert row["per_layer_saved"] * spec.layers <= est <= 1.2 * row["per_layer_saved"] * spec.layers
    thr = MEASURED["throughput"][shape]
    assert thr["params"] == pytest.approx(spec.params, rel=0.01)
    assert budget.THROUGHPUT.train_mfu <= thr["model_tflops_6N"] / budget.GPUS["h200"][1]


@pytest.mark.parametrize("hub_id,card", [("LLM4Binary/llm4decompile-6.7b-v2", 6.7), ("Qwen/Qwen3-4B", 4.0),
                                         ("Qwen/Qwen3-8B", 8.2), ("Qwen/Qwen3-14B", 14.8),
                                         ("Qwen/Qwen3-Embedding-0.6B", 0.6), ("TIGER-Lab/AceCodeRM-7B", 7.6)])
def test_parameter_counts_match_the_model_cards(hub_id, card):
    assert budget.KNOWN_MODELS[hub_id].params / 1e9 == pytest.approx(card, abs=0.05)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_parameter_count_formula_matches_transformers(arch):
    import transformers

    kw = dict(vocab_size=300, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, tie_word_embeddings=arch == "qwen3")
    conf = transformers.LlamaConfig(**kw) if arch == "llama" else transformers.Qwen3Config(head_dim=16, **kw)
    model = transformers.AutoModelForCausalLM.from_config(conf)
    spec = budget.spec_from_hf_config(arch, conf.to_dict())
    assert spec.params == sum(p.numel() for p in model.parameters())


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
    assert any(p.startswith("skin_rl:") and "skin_rl.gpu_memory_utilization" in p
               for p in budget.build_budget(cfg)["problems"])


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


def test_reward_model_estimate_covers_the_h200_measurement():
    """benchmarks/rm_memory_probe.py on one H200: the real scorer in AceCodeRM-7B's shape (bf16, 4 x 6144 tokens)."""
    m = json.loads((ROOT / "docs" / "measurements" / "rm_memory_probe_h200.json").read_text())
    est = budget.reward_model_memory({}, {"model": "TIGER-Lab/AceCodeRM-7B", "dtype": m["dtype"],
                                          "batch_size": m["batch_size"], "max_length": m["max_length"]})
    assert est["weights_gb"] == pytest.approx(m["weights_bytes"] / 1e9, rel=0.01)
    assert est["activations_gb"] == pytest.approx(m["activation_peak_bytes"] / 1e9, rel=0.05)
    assert m["peak_reserved_bytes"] / 1e9 <= est["peak_gb"] <= 1.1 * m["peak_reserved_bytes"] / 1e9


def test_cpu_default_plan(tmp_path):
    cfg = load_config(ROOT / "config.yaml", check_files=False)
    cfg["results_dir"] = str(tmp_path)
    b = budget.build_budget(cfg)
    assert b["problems"] == [] and b["totals"]["gpu_hours"] == 0
    assert {j["run"] for j in b["jobs"]} >= {"sft_skeleton", "skeleton_rl", "skin_rl", "dhrcl-full-seed0"}
    assert all(j["memory"] is None and j["params"] > 0 for j in b["jobs"])
    md = budget.budget_markdown(b)
    assert "| dhrcl-full-seed0 | tiny |" in md


def test_checked_in_paper_budget_is_current(paper_cfg, tmp_path):
    """docs/budget-paper.md is what `python -m codegrpo.budget --config config/paper.yaml --md
    docs/budget-paper.md` writes (rows from budget.expected_rows: no data built)."""
    cfg = _cfg(paper_cfg, tmp_path)
    cmd = "python -m codegrpo.budget --config config/paper.yaml --md docs/budget-paper.md"
    want = budget.budget_markdown(budget.build_budget(paper_cfg, use_files=False), command=cmd)
    assert (ROOT / "docs" / "budget-paper.md").read_text(encoding="utf-8") == want
    assert not math.isnan(budget.build_budget(cfg)["totals"]["gpu_hours"])


def test_paper_embedding_server_bounds_its_context_and_skips_cuda_graphs(paper_cfg):
    """vLLM's embedding server took Qwen3-Embedding's 32k max_model_len (a profiling run that does not fit 10 % of
    a GPU under ~64 GB) and captured CUDA graphs beside training; the paper command bounds both."""
    import re
    import shlex

    argv = shlex.split(paper_cfg["embedding"]["server_command"])
    assert "--enforce-eager" in argv
    max_len = int(argv[argv.index("--max-model-len") + 1])
    s = paper_cfg["skin_rl"]
    assert s["max_prompt_length"] + s["max_response_length"] <= max_len < 32768
    assert budget.server_memory_fraction(paper_cfg["embedding"]) == 0.1
    assert re.search(r"--gpu-memory-utilization 0\.1\b", paper_cfg["embedding"]["server_command"])


def test_each_model_size_has_its_own_run_folders(paper_cfg, tmp_path):
    """Qwen3-4B / 8B / 14B: the model is in the run name, so a second size never shares a folder with the first;
    each size's runs get its init and its training overrides."""
    from codegrpo.verl.dhrcl import model_cfg, plan_runs

    runs = plan_runs(paper_cfg)
    assert {r["model"] for r in runs.values()} == {"Qwen3-4B", "Qwen3-8B", "Qwen3-14B"}
    assert {"dhrcl-Qwen3-4B-full-seed0", "dhrcl-Qwen3-8B-full-seed0", "dhrcl-Qwen3-14B-full-seed0"} <= set(runs)
    assert runs["dhrcl-Qwen3-14B-full-seed2"] == {"variant": "full", "seed": 2, "model": "Qwen3-14B",
                                                  "init": "Qwen/Qwen3-14B"}
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


def test_evaluation_engine_memory_by_hand_and_refused_when_a_sequence_does_not_fit(paper_cfg, tmp_path):
    b = budget.build_budget(_cfg(paper_cfg, tmp_path))
    e = next(e for e in b["eval_jobs"] if e["job"] == "eval_codegen dhrcl-Qwen3-8B-full-seed0")["memory"]
    # 0.85 x 80 GB engine - 2 x 8.19e9 bf16 weights - 1 GB reserve, over 2 x 36 layers x 8 KV heads x 128 x 2 bytes
    kv_per_token = 2 * 36 * 8 * 128 * 2
    assert e["kv_cache_tokens"] == int((0.85 * 80e9 - 2 * 8.19073536e9 - 1e9) / kv_per_token)
    assert e["max_model_len"] == 8192 + 2048 and e["fits"] is True
    small = budget.build_budget(_cfg(paper_cfg, tmp_path, **{"cluster.gpu_memory_gb": 24}))
    assert any(p.startswith("eval_codegen dhrcl-Qwen3-14B-full-seed0:")
               and "evaluate.vllm.gpu_memory_utilization" in p for p in small["problems"])


def test_evaluation_gpu_hours_by_hand(paper):
    """A run's code-generation job: problems x samples x max_new_tokens generated after prompts of
    max_prompt_tokens, at 2 Psi FLOPs per token and the rollout MFU; a decompilation system with a skin model
    runs two phases on 164 x 4 tasks of each enabled benchmark."""
    cfg = copy.deepcopy(paper)
    gen = cfg["evaluate"]["codegen"]
    gen.update(benchmarks=["humaneval", "bigcodebench_hard"], n_samples=2, max_new_tokens=100, limit=None)
    cfg["evaluate"]["max_prompt_tokens"] = 50
    generated, prompts = budget._codegen_tokens(cfg, gen)
    assert (generated, prompts) == ((164 + 148) * 2 * 100, (164 + 148) * 2 * 50)
    # evaluate.codegen.limit caps each benchmark's problems
    assert budget._codegen_tokens(cfg, dict(gen, limit=150))[0] == (150 + 148) * 2 * 100
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

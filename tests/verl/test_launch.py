"""Generated verl command lines: Hydra composition against verl 0.4.1's own config, settings reaching verl, reward loading."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from codegrpo.config import load_config
from codegrpo.contracts import RL_STAGES
from codegrpo.verl import launch as L
from tests.conftest import REPO_ROOT as REPO
from tests.verl import launch_files


def _launches(cfg, tmp_path):
    out = []
    for which in L.SFT_RUNS:
        out.append(
            L.sft_launch(
                cfg,
                which,
                train_files=tmp_path / f"{which}.train.parquet",
                val_files=tmp_path / f"{which}.val.parquet",
                model_path="/models/base",
                run_dir=tmp_path / f"sft_{which}",
            )
        )
    for stage in RL_STAGES:
        out.append(
            L.grpo_launch(
                cfg,
                cfg[stage],
                stage,
                train_files=[tmp_path / "a.parquet"],
                val_files=tmp_path / "v.parquet",
                model_path="/models/sft",
                run_dir=tmp_path / stage,
            )
        )
    return out


def _rl_row(data_source: str) -> dict:
    """One well-formed verl RL row of ``data_source`` (prompt "x", ground truth "int f;")."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": "x"}],
        "ability": "decompile",
        "reward_model": {"style": "rule", "ground_truth": "int f;"},
        "extra_info": {"index": 0},
    }


@pytest.fixture(scope="module", params=["config.yaml", "config/paper.yaml"])
def composed(request, repo_root, tmp_path_factory):
    cfg = load_config(repo_root / request.param)
    tmp = tmp_path_factory.mktemp("launch")
    return request.param, cfg, [(la, la.validate()) for la in _launches(cfg, tmp)]


def test_every_generated_command_composes(composed):
    name, cfg, items = composed
    assert [la.run for la, _ in items] == ["sft_skeleton", "sft_skin", "skeleton_rl", "skin_rl"]
    for la, c in items:
        assert c.codegrpo.device == cfg["device"]
        assert c.codegrpo.metrics_file.endswith(f"{la.run}/metrics.jsonl")
        # the command line carries exactly the overrides that were composed
        argv = shlex.split(la.command())
        assert argv[-len(la.overrides) :] == la.overrides


# config key of an RL stage (schemas/config.schema.yaml $defs/rl_stage) -> the verl key it must set
RL_KEY_MAP = {
    "train_batch_size": "data.train_batch_size",
    "max_prompt_length": "data.max_prompt_length",
    "max_response_length": "data.max_response_length",
    "filter_overlong_prompts": "data.filter_overlong_prompts",
    "use_remove_padding": "actor_rollout_ref.model.use_remove_padding",
    "gradient_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "lr": "actor_rollout_ref.actor.optim.lr",
    "ppo_mini_batch_size": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "ppo_epochs": "actor_rollout_ref.actor.ppo_epochs",
    "kl_coef": "actor_rollout_ref.actor.kl_loss_coef",
    "kl_loss_type": "actor_rollout_ref.actor.kl_loss_type",
    "entropy_coeff": "actor_rollout_ref.actor.entropy_coeff",
    "param_offload": "actor_rollout_ref.actor.fsdp_config.param_offload",
    "optimizer_offload": "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
    "ref_param_offload": "actor_rollout_ref.ref.fsdp_config.param_offload",
    "ref_log_prob_micro_batch_size_per_gpu": "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "rollout_name": "actor_rollout_ref.rollout.name",
    "n": "actor_rollout_ref.rollout.n",
    "temperature": "actor_rollout_ref.rollout.temperature",
    "tensor_model_parallel_size": "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "rollout_log_prob_micro_batch_size_per_gpu": "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "project_name": "trainer.project_name",
    "nnodes": "trainer.nnodes",
    "n_gpus_per_node": "trainer.n_gpus_per_node",
    "total_epochs": "trainer.total_epochs",
    "save_freq": "trainer.save_freq",
    "test_freq": "trainer.test_freq",
    "val_before_train": "trainer.val_before_train",
    "max_checkpoints_to_keep": "trainer.max_actor_ckpt_to_keep",
}
_OTHER = {"kl_loss_type": ("low_var_kl", "mse"), "rollout_name": ("vllm", "hf")}


def _changed(key, value, i):
    """A value different from ``value`` and from every other key's new value (so a swap shows)."""
    if key in _OTHER:
        a, b = _OTHER[key]
        return b if value == a else a
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 101 + i
    if isinstance(value, float):
        return round(value / 2 + 0.001 * (i + 1), 6)
    return f"{value}-changed-{i}"


@pytest.mark.parametrize("stage", ["skeleton_rl", "skin_rl"])
def test_every_rl_setting_reaches_its_verl_key(repo_root, tmp_path, stage):
    """Each key of the stage's config section, set to a value of its own, arrives at the verl key it names in
    the composed config of that stage (GPU config). Catches a setting wired to the wrong verl key (actor vs ref
    micro batch, the two offloads), a value that two keys swap, a stage that reads the other stage's section,
    and a later override (CPU mode, defaults) that silently replaces a configured value."""
    from omegaconf import OmegaConf

    cfg = load_config(repo_root / "config" / "paper.yaml")
    assert cfg["device"] != "cpu"
    section = {**cfg[stage]}
    expected = {}
    for i, (key, path) in enumerate(RL_KEY_MAP.items()):
        assert key in section, f"{stage}.{key}: no longer a config key (update RL_KEY_MAP)"
        section[key] = _changed(key, section[key], i)
        expected[path] = section[key]
    section["kl_coef"] = expected["actor_rollout_ref.actor.kl_loss_coef"] = 0.0375
    hc = L.grpo_launch({**cfg, stage: section}, section, stage, **launch_files(tmp_path, run_dir=tmp_path / stage))
    hc = hc.validate()
    got = {path: OmegaConf.select(hc, path) for path in expected}
    assert got == expected
    assert hc.actor_rollout_ref.actor.use_kl_loss is True  # kl_coef > 0 turns the KL loss on
    assert hc.trainer.experiment_name == stage and hc.trainer.device == "cuda"


@pytest.mark.parametrize("stage", ["skeleton_rl", "skin_rl"])
def test_reward_function_named_by_each_stage_exists_in_the_entry_file(repo_root, tmp_path, stage):
    """verl loads ``custom_reward_function.name`` from ``.path`` by file; a renamed function fails only at the
    first reward call of a training job. Load it as verl does and score one sample of the stage's data source."""
    import importlib.util

    from codegrpo.contracts import STAGE_DATA_SOURCE

    cfg = load_config(repo_root / "config" / "paper.yaml")
    hc = L.grpo_launch(cfg, cfg[stage], stage, **launch_files(tmp_path, run_dir=tmp_path / stage)).validate()
    spec = importlib.util.spec_from_file_location("custom_module", hc.custom_reward_function.path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, hc.custom_reward_function.name)
    if stage != "skeleton_rl":  # the identifier reward needs an embedding service; the name and arity suffice
        assert hc.reward_model.reward_manager == "batch" and fn.__name__ == "compute_score_batch"
        return
    gt = "int func0(int var1) { return var1; }"
    out = fn(data_source=STAGE_DATA_SOURCE["skeleton"], solution_str=gt, ground_truth=gt, extra_info={"header": ""})
    assert out["score"] >= 1.0 and out["compile"] == 1.0


# config key of the sft section -> the verl fsdp_sft_trainer keys it must set
SFT_KEY_MAP = {
    "train_batch_size": ("data.train_batch_size",),
    "micro_batch_size_per_gpu": ("data.micro_batch_size_per_gpu",),
    "max_length": ("data.max_length",),
    "truncation": ("data.truncation",),
    "gradient_checkpointing": ("model.enable_gradient_checkpointing",),
    "offload": ("model.fsdp_config.cpu_offload", "model.fsdp_config.offload_params"),
    "lr": ("optim.lr",),
    "lr_scheduler": ("optim.lr_scheduler",),
    "warmup_steps_ratio": ("optim.warmup_steps_ratio",),
    "weight_decay": ("optim.weight_decay",),
    "project_name": ("trainer.project_name",),
    "total_epochs": ("trainer.total_epochs",),
    "save_freq": ("trainer.save_freq",),
    "test_freq": ("trainer.test_freq",),
    "n_gpus_per_node": ("trainer.n_gpus_per_node",),
}
_OTHER.update({"truncation": ("right", "left"), "lr_scheduler": ("cosine", "wsd")})


@pytest.mark.parametrize("which", ["skeleton", "skin"])
def test_every_sft_setting_reaches_its_verl_key(repo_root, tmp_path, which):
    """As for RL: each sft setting, changed to a value of its own, arrives at its verl key(s) and in the torchrun
    command (GPUs per node); the trainer reads the columns the data stage writes."""
    from omegaconf import OmegaConf

    from codegrpo.data.parquet import SFT_SCHEMA

    cfg = load_config(repo_root / "config" / "paper.yaml")
    sft = {**cfg["sft"]}
    expected = {}
    for i, (key, paths) in enumerate(SFT_KEY_MAP.items()):
        assert key in sft, f"sft.{key}: no longer a config key (update SFT_KEY_MAP)"
        sft[key] = _changed(key, sft[key], i)
        expected.update({path: sft[key] for path in paths})
    la = L.sft_launch({**cfg, "sft": sft}, which, **launch_files(tmp_path, model_path="/models/base"))
    c = la.validate()
    assert {path: OmegaConf.select(c, path) for path in expected} == expected
    assert c.model.partial_pretrain == "/models/base" and c.trainer.experiment_name == f"sft_{which}"
    assert [c.data.prompt_key, c.data.response_key] == SFT_SCHEMA.names
    assert f"--nproc_per_node={sft['n_gpus_per_node']}" in la.argv
    assert la.argv[la.argv.index("-m", 3) + 1] == "codegrpo.verl.sft_main"


def test_cpu_mode_overrides_only_in_cpu_mode(repo_root, tmp_path):
    cpu_cfg = load_config(repo_root / "config.yaml")
    gpu_cfg = load_config(repo_root / "config" / "paper.yaml")
    kw = launch_files(tmp_path)
    c = L.grpo_launch(cpu_cfg, cpu_cfg["skeleton_rl"], "skeleton_rl", **kw).validate()
    g = L.grpo_launch(gpu_cfg, gpu_cfg["skeleton_rl"], "skeleton_rl", **kw)
    assert c.trainer.device == "cpu" and c.actor_rollout_ref.rollout.name == "hf"
    assert c.actor_rollout_ref.actor.strategy == "fsdp2" and c.trainer.n_gpus_per_node == 1
    assert not any(o.startswith("trainer.device=") for o in g.overrides)
    assert "actor_rollout_ref.rollout.name=hf" not in g.overrides
    assert "HF_HUB_OFFLINE" not in g.env and L.sft_launch(cpu_cfg, "skin", **kw).env["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize(
    "bad, needle",
    [
        ("actor_rollout_ref.rollout.nn=4", "actor_rollout_ref.rollout.nn"),
        ("algorithm.adv_estimater=grpo", "algorithm.adv_estimater"),
        ("codegrpo.metrics_fle=x", "codegrpo.metrics_fle"),
    ],
)
def test_misspelled_grpo_key_is_rejected(repo_root, tmp_path, bad, needle):
    cfg = load_config(repo_root / "config.yaml")
    cfg["skeleton_rl"]["overrides"] = [bad]
    la = L.grpo_launch(cfg, cfg["skeleton_rl"], "skeleton_rl", **launch_files(tmp_path))
    with pytest.raises(L.LaunchConfigError, match="verl config rejected") as err:
        la.validate()
    assert needle in str(err.value) and "not in struct" in str(err.value)
    # nothing is launched when validation fails
    with pytest.raises(L.LaunchConfigError):
        la.run_process(tmp_path / "r" / "train.log")
    assert not (tmp_path / "r" / "train.log").exists()


def test_misspelled_sft_key_is_rejected(repo_root, tmp_path):
    cfg = load_config(repo_root / "config.yaml")
    cfg["sft"]["overrides"] = ["optim.learning_rate=1"]
    la = L.sft_launch(cfg, "skeleton", **launch_files(tmp_path))
    with pytest.raises(L.LaunchConfigError, match="optim.learning_rate"):
        la.validate()


def test_compose_from_several_threads():
    """Launches prepared in several threads at once (the learning checks, two at a time) all compose: Hydra's
    global instance is taken one compose at a time."""
    from concurrent.futures import ThreadPoolExecutor

    overrides = [["trainer.device=cpu", f"trainer.total_training_steps={i + 1}"] for i in range(8)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        composed = list(pool.map(lambda ov: L.compose("grpo", ov), overrides))
    assert [c.trainer.total_training_steps for c in composed] == list(range(1, 9))


def test_driver_composes_and_starts_ray_without_importing_verl():
    """The GRPO driver composes its config and prepares Ray without importing verl: verl's import (a few
    CPU-seconds) is paid by the TaskRunner and the workers that use it, not again on every run's critical path.
    The composition still layers over verl's own ppo_trainer.yaml and sft_trainer.yaml, found by path."""
    code = (
        "import json, sys\n"
        "from omegaconf import OmegaConf\n"
        "from codegrpo.verl import driver\n"
        "from codegrpo.verl.launch import compose, verl_config_dir\n"
        "g = compose('grpo', ['trainer.device=cpu', 'codegrpo.device=cpu'])\n"
        "s = compose('sft', [])\n"
        "kw = driver.ray_init_kwargs(g)\n"
        "verl = sorted(m for m in sys.modules if m == 'verl' or m.startswith('verl.'))\n"
        "p = OmegaConf.load(verl_config_dir() / 'ppo_trainer.yaml')\n"
        "t = OmegaConf.load(verl_config_dir() / 'sft_trainer.yaml')\n"
        "print(json.dumps({'verl': verl, 'hook': kw['runtime_env'].get('worker_process_setup_hook'),\n"
        "  'cpus': driver.TaskRunner._default_options.get('num_cpus'),\n"
        "  'ours': [g.algorithm.gamma, g.data.prompt_key, g.algorithm.adv_estimator, s.optim.lr, s.data.prompt_key],\n"
        "  'verls': [p.algorithm.gamma, p.data.prompt_key, p.algorithm.adv_estimator, t.optim.lr, t.data.prompt_key]}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["verl"] == [], got["verl"]
    assert got["hook"] == "codegrpo.verl.cpu.setup" and got["cpus"] == 1
    # verl's own defaults where the project configs are silent, the project's where they speak
    assert got["ours"][:2] == got["verls"][:2] and got["ours"][3] == got["verls"][3]
    assert (got["ours"][2], got["verls"][2]) == ("grpo", "gae")
    assert (got["ours"][4], got["verls"][4]) == ("prompt", "question")


def test_broken_interpolation_is_rejected():
    with pytest.raises(L.LaunchConfigError, match="no_such_key"):
        L.compose("grpo", ["trainer.experiment_name=${trainer.no_such_key}"])


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, "null"),
        (True, "true"),
        (3, "3"),
        (1e-6, "1e-06"),
        (["console", "wandb"], "[console,wandb]"),
        ("/a/b.parquet", "/a/b.parquet"),
        ("has space", "'has space'"),
        ("it's", "'it\\'s'"),
        ("null", "'null'"),
    ],
)
def test_override_value_format(value, expected):
    assert L.fmt(value) == expected


def test_override_values_round_trip_through_hydra(tmp_path):
    odd = str(tmp_path / "dir with space" / "it's,odd=1.parquet")
    c = L.compose("grpo", [f"data.train_files={L.fmt(odd)}", f"trainer.logger={L.fmt(['console'])}"])
    assert c.data.train_files == odd and list(c.trainer.logger) == ["console"]


def test_reward_managers_load_through_verl(tmp_path, repo_root):
    """The generated reward settings load verl's naive and batch managers on the project's reward file."""
    if not L.REWARD_ENTRY.exists():
        pytest.skip("codegrpo/verl/reward_entry.py not present")
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto
    from verl.trainer.ppo.reward import compute_reward, load_reward_manager

    from codegrpo.models import build_tiny_model, load_model

    rows = [json.loads(x) for x in open(repo_root / "data/sk2decompile/sk2decompile-rl-examples.jsonl")][:2]
    texts = [r["prompt"][0]["content"] for r in rows] + [r["reward_model"]["ground_truth"] for r in rows]
    build_tiny_model(tmp_path / "m", texts, vocab_size=400)
    _, tok = load_model(tmp_path / "m")
    # two skeleton samples: the ground truth itself and garbage
    responses = [rows[0]["reward_model"]["ground_truth"], "}{ not C"]
    p_ids = [tok("p").input_ids] * 2
    r_ids = [tok(r).input_ids + [tok.eos_token_id] for r in responses]
    width = max(map(len, r_ids))
    resp = torch.full((2, width), tok.pad_token_id)
    mask = torch.zeros((2, 1 + width), dtype=torch.long)
    for i, ids in enumerate(r_ids):
        resp[i, : len(ids)] = torch.tensor(ids)
        mask[i, : 1 + len(ids)] = 1
    prompts = torch.tensor(p_ids)
    batch = TensorDict(
        {"prompts": prompts, "responses": resp, "input_ids": torch.cat([prompts, resp], 1), "attention_mask": mask},
        batch_size=2,
    )
    extra = [{"index": 0, "split": "train", "header": rows[0]["extra_info"]["header"], "header_status": "ok"}] * 2
    data = DataProto(
        batch=batch,
        non_tensor_batch={
            "data_source": np.array(["sk2decompile_structure"] * 2, dtype=object),
            "reward_model": np.array(
                [{"style": "rule", "ground_truth": rows[0]["reward_model"]["ground_truth"]}] * 2, dtype=object
            ),
            "extra_info": np.array(extra, dtype=object),
        },
    )
    cfg = load_config(repo_root / "config.yaml")
    scores = {}
    for manager, fn, cls in [
        ("naive", "compute_score", "NaiveRewardManager"),
        ("batch", "compute_score_batch", "BatchRewardManager"),
    ]:
        cfg["skeleton_rl"]["reward"] = {"manager": manager, "function": fn}
        c = L.grpo_launch(
            cfg, cfg["skeleton_rl"], "skeleton_rl", **launch_files(tmp_path, model_path=str(tmp_path / "m"))
        )
        c = c.validate()
        reward_fn = load_reward_manager(c, tok, num_examine=0)
        assert type(reward_fn).__name__ == cls
        tensor, info = compute_reward(data, reward_fn)
        scores[manager] = tensor.sum(-1).tolist()
        assert "score" in info and len(info["score"]) == 2
    assert scores["naive"] == scores["batch"]
    assert scores["naive"][0] > scores["naive"][1]


def test_experiment_name_for_other_runs(repo_root, tmp_path):
    cfg = load_config(repo_root / "config.yaml")
    la = L.grpo_launch(cfg, cfg["dhrcl"]["training"], "dhrcl-full", **launch_files(tmp_path))
    assert la.run == "dhrcl-full" and "trainer.experiment_name=dhrcl-full" in la.overrides


# ---------------------------------------------------------------------------------------------------------
# metrics file and callbacks (pure Python, no training)


def test_metrics_file_merges_steps_and_replaces_rerun_steps(tmp_path):
    import numpy as np

    from codegrpo.verl.metrics import MetricsFile

    path = tmp_path / "run" / "metrics.jsonl"
    first = MetricsFile(path)
    first.log(1, {"train/loss": np.float32(2.5), "n": np.int64(3)})
    first.log(1, {"val/loss": 2.0})  # same step, second call: merged
    first.log(2, {"train/loss": 2.25, "stale": 1.0, "bad": float("nan"), "obj": object()})
    assert [json.loads(x) for x in path.read_text().splitlines()] == [
        {"step": 1, "train/loss": 2.5, "n": 3, "val/loss": 2.0},
        {"step": 2, "train/loss": 2.25, "stale": 1.0},
    ]
    # a resumed process re-runs step 2: its first value replaces the killed attempt's line
    second = MetricsFile(path)
    second.log(2, {"train/loss": 2.0})
    second.log(3, {"train/loss": 1.5})
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[1] == {"step": 2, "train/loss": 2.0}
    path.write_text(path.read_text() + "not json\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:4: not a metrics line"):
        MetricsFile(path)


def test_callback_resolution():
    from codegrpo.verl.trainer import resolve_callable

    assert resolve_callable("json:dumps") is json.dumps and resolve_callable("json.loads") is json.loads
    with pytest.raises(ValueError, match="cannot be loaded"):
        resolve_callable("json:no_such_fn")
    with pytest.raises(ValueError, match="cannot be loaded"):
        resolve_callable("no_such_module_xyz:fn")
    with pytest.raises(ValueError, match="not callable"):
        resolve_callable("json:__doc__")


def _stage_inputs(tmp_path, train: str, val: str, run: str) -> dict:
    """run_grpo / run_sft / run_rl_stage keywords: ``<train>.parquet`` and ``<val>.parquet`` and the run folder
    ``run`` under tmp_path, a hub id (never fetched) as the model."""
    files = {"train_files": tmp_path / f"{train}.parquet", "val_files": tmp_path / f"{val}.parquet"}
    return {**files, "init_model": "org/model", "run_dir": tmp_path / run}


def test_bad_training_inputs_are_rejected_before_launch(tmp_path, repo_root):
    import pandas as pd

    from codegrpo.data.training_inputs import TrainingInputError, check_model, check_parquet
    from codegrpo.verl.stages import run_grpo, run_sft

    good_rl = _rl_row("sk2decompile_structure")
    pd.DataFrame([good_rl, good_rl]).to_parquet(tmp_path / "rl.parquet")
    assert check_parquet(tmp_path / "rl.parquet", "rl") == 2
    pd.DataFrame([good_rl, {**good_rl, "prompt": []}]).to_parquet(tmp_path / "bad_rl.parquet")
    with pytest.raises(TrainingInputError, match=r"bad_rl.parquet: row 1: field 'prompt'"):
        check_parquet(tmp_path / "bad_rl.parquet", "rl")
    pd.DataFrame([{"prompt": "p", "response": ""}]).to_parquet(tmp_path / "bad_sft.parquet")
    with pytest.raises(TrainingInputError, match=r"bad_sft.parquet: row 0: field 'response'"):
        check_parquet(tmp_path / "bad_sft.parquet", "sft")
    pd.DataFrame([{"question": "p", "answer": "a"}]).to_parquet(tmp_path / "cols.parquet")
    with pytest.raises(TrainingInputError, match=r"missing column\(s\) \['prompt', 'response'\]"):
        check_parquet(tmp_path / "cols.parquet", "sft")
    with pytest.raises(TrainingInputError, match="does not exist"):
        check_parquet(tmp_path / "nope.parquet", "rl")
    with pytest.raises(TrainingInputError, match="not a Hugging Face folder"):
        check_model(str(tmp_path))
    check_model("LLM4Binary/llm4decompile-6.7b-v2")  # hub ids are resolved by the trainer
    # the stage functions stop before launching and leave nothing that looks complete
    cfg = load_config(repo_root / "config.yaml")
    with pytest.raises(TrainingInputError):
        run_grpo(cfg, cfg["skeleton_rl"], "skeleton_rl", **_stage_inputs(tmp_path, "bad_rl", "rl", "run"))
    with pytest.raises(TrainingInputError):
        run_sft(cfg, "skin", **_stage_inputs(tmp_path, "bad_sft", "bad_sft", "run2"))
    assert not (tmp_path / "run" / "done.json").exists() and not (tmp_path / "run" / "train.log").exists()


def test_multi_node_sft_command(repo_root, tmp_path, monkeypatch):
    cfg = load_config(repo_root / "config" / "paper.yaml")
    cfg["sft"]["nnodes"] = 2
    monkeypatch.setenv("MASTER_ADDR", "node7")
    monkeypatch.setenv("MASTER_PORT", "29611")
    # inside the executor plugin's job step: its geometry must not reach the torchrun step
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_MEM_PER_CPU", "1000")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    la = L.sft_launch(cfg, "skeleton", **launch_files(tmp_path))
    i = la.argv.index("srun")
    assert la.argv[:i] == ["env", "-u", "SLURM_MEM_PER_CPU", "-u", "SLURM_NTASKS"]
    j = la.argv.index(sys.executable)
    srun = la.argv[i:j]
    # overlaps the rule's own step, one task per node with the node's CPUs, memory and 8 GPUs, all visible
    assert srun[:5] == ["srun", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1"]
    for flag in ("--cpus-per-task=64", "--mem=0", "--gres=gpu:8", "--gpu-bind=none", "--kill-on-bad-exit=1"):
        assert flag in srun, (flag, srun)
    assert la.argv[j + 1 : j + 3] == ["-m", "torch.distributed.run"]
    assert "--rdzv_endpoint=node7:29611" in la.argv and "--nproc_per_node=8" in la.argv
    assert la.validate().trainer.nnodes == 2


def test_structure_reward_setting_reaches_the_reward_kwargs(repo_root, tmp_path):
    from codegrpo.verl.stages import structure_reward_overrides

    cfg = load_config(repo_root / "config.yaml")
    kw = launch_files(tmp_path)
    assert structure_reward_overrides("skeleton_rl", cfg["skeleton_rl"]) == []
    cfg["skeleton_rl"]["structure_reward"] = "sim_exe"
    ov = structure_reward_overrides("skeleton_rl", cfg["skeleton_rl"])
    c = L.grpo_launch(cfg, cfg["skeleton_rl"], "skeleton_rl", extra_overrides=ov, **kw).validate()
    assert dict(c.custom_reward_function.reward_kwargs.data_source_map) == {
        "sk2decompile_structure": "sk2decompile_structure_sim",
        "llm4decompile_exe": "sk2decompile_structure_sim",
    }
    cfg["skin_rl"]["structure_reward"] = "sim_exe"
    with pytest.raises(ValueError, match="skeleton_rl only"):
        structure_reward_overrides("skin_rl", cfg["skin_rl"])


def test_kl_coef_default_comes_from_the_schema(repo_root, tmp_path):
    """No kl_coef in the file: each stage gets its schema default; a changed value reaches verl."""
    from codegrpo.config import validate_config

    cfg = validate_config({"device": "cpu"})
    kw = launch_files(tmp_path)
    got = {s: L.grpo_launch(cfg, cfg[s], s, **kw).validate().actor_rollout_ref.actor.kl_loss_coef for s in RL_STAGES}
    assert got == {"skeleton_rl": 0.01, "skin_rl": 0.02}
    cfg["skin_rl"]["kl_coef"] = 0.0
    c = L.grpo_launch(cfg, cfg["skin_rl"], "skin_rl", **kw).validate()
    assert c.actor_rollout_ref.actor.kl_loss_coef == 0.0 and c.actor_rollout_ref.actor.use_kl_loss is False


def test_readme_stage_rerun_schedules_the_training_job(repo_root, tmp_path):
    """README's rerun command (--forcerun <stage>_train --until <stage>) really schedules the training rule."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (repo_root / "README.md").read_text()
    m = re.search(r"snakemake --cores 2 (--forcerun \S+ --until \S+)\s+# retrain one stage", readme)
    assert m, "README lost its stage rerun command"
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    out = subprocess.run(
        [
            snakemake,
            "-n",
            "--cores",
            "2",
            *m.group(1).split(),
            "--directory",
            str(repo_root),
            "--config",
            f"results_dir={tmp_path / 'results'}",
            f"logs_dir={tmp_path / 'logs'}",
        ],
        cwd=repo_root,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", out.stdout, re.M))
    assert jobs.get("skeleton_rl_train") == "1" and "skin_rl_train" not in jobs
    # the training job itself is forced (forcing only the empty target rule would not retrain a finished stage)
    assert re.search(r"forced:\s*\n\s*skeleton_rl_train\b", out.stdout), out.stdout[-1500:]


def test_training_launch_hands_workers_only_the_settings_file(repo_root, tmp_path, monkeypatch):
    """run_rl_stage(skin_rl) with embedding.serve: the reward sections are resolved into settings.json, the
    served endpoint is written there before the trainer starts, and the trainer's process environment and Ray's
    runtime_env carry, of the project's variables, only $CODEGRPO_RUN_SETTINGS (stale overrides in the caller's
    environment are dropped). A loopback HTTP server stands in for the embedding server."""
    import os
    from unittest import mock

    import pandas as pd

    from codegrpo import runsettings
    from codegrpo.rewards.compile import engine_settings
    from codegrpo.rewards.embedding import settings_from_env
    from codegrpo.sandbox.client import default_sandbox_settings
    from codegrpo.verl import stages
    from codegrpo.verl.grpo_settings import fingerprint

    row = _rl_row("sk2decompile_identifier")
    pd.DataFrame([row] * 4).to_parquet(tmp_path / "rl.parquet")
    models = tmp_path / "www" / "v1" / "models"  # GET /v1/models answers 200
    models.parent.mkdir(parents=True)
    models.write_text("{}")
    cfg = load_config(repo_root / "config.yaml")
    cfg["embedding"] = {
        **cfg["embedding"],
        "serve": True,
        "chunk_size": 3,
        "server_command": f"{{python}} -m http.server {{port}} --bind {{host}} "
        f"--directory {shlex.quote(str(tmp_path / 'www'))}",
    }
    cfg["compile_reward"] = {**cfg["compile_reward"], "mode": "exact"}
    cfg["sandbox"] = {**cfg["sandbox"], "wall_s": 7}
    for name in [k for k in os.environ if k.startswith("CODEGRPO_")]:  # e.g. left by another test module
        monkeypatch.delenv(name)
    for name in (
        "CODEGRPO_COMPILE_MODE",
        "CODEGRPO_EMBEDDING_API_BASE",
        "CODEGRPO_SANDBOX_LIMITS",
        "CODEGRPO_SANDBOX_WORKERS",
        "CODEGRPO_DHRCL_STAGE",
    ):
        monkeypatch.setenv(name, "stale")
    monkeypatch.delenv(runsettings.SETTINGS_ENV, raising=False)
    seen = {}

    def fake_run_process(launch, log_file, cwd=None):
        env = launch.process_env()
        doc = json.loads(open(env[runsettings.SETTINGS_ENV]).read())
        seen.update(env=env, doc=doc)
        from codegrpo.verl.driver import ray_init_kwargs

        with mock.patch.dict(os.environ, env, clear=True):
            seen["ray"] = ray_init_kwargs(launch.validate())["runtime_env"]["env_vars"]
            seen["compile"] = engine_settings()  # what the reward code resolves in the trainer's processes
            seen["embedding"] = settings_from_env()
            seen["sandbox"] = default_sandbox_settings()
        return 1

    monkeypatch.setattr(L.Launch, "run_process", fake_run_process)
    with pytest.raises(stages.TrainingError, match="exited with status 1"):
        stages.run_rl_stage(cfg, "skin_rl", **_stage_inputs(tmp_path, "rl", "rl", "skin_rl"))
    ours = sorted(k for k in seen["env"] if k.startswith("CODEGRPO_"))
    assert ours == [runsettings.SETTINGS_ENV], ours
    assert sorted(k for k in seen["ray"] if k.startswith("CODEGRPO_")) == [runsettings.SETTINGS_ENV]
    assert seen["ray"][runsettings.SETTINGS_ENV] == str((tmp_path / "skin_rl" / "settings.json").resolve())
    settings, served = seen["doc"]["settings"], seen["doc"]["served"]["embedding"]
    assert settings["compile_reward"]["mode"] == "exact" and settings["sandbox"]["wall_s"] == 7
    assert settings["embedding"]["serve"] is True and settings["embedding"]["chunk_size"] == 3
    assert served["api_base"].startswith("http://127.0.0.1:") and served["backend"] == "openai"
    assert seen["compile"]["mode"] == "exact" and seen["sandbox"]["wall_s"] == 7
    assert (seen["embedding"].api_base, seen["embedding"].chunk_size) == (served["api_base"], 3)
    # the fingerprint (resume vs. fresh start) does not depend on the port the server got
    assert seen["doc"]["fingerprint"] == fingerprint(settings)


def test_reward_runs_on_the_node_of_the_embedding_server(repo_root, tmp_path):
    """The embedding server listens on 127.0.0.1 of the job's node (where the driver runs); the reward runs in
    verl's TaskRunner, which is pinned there (hard node affinity), never in verl's async reward task."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from codegrpo.verl.driver import task_runner_options

    opts = task_runner_options("a" * 56)
    strategy = opts["scheduling_strategy"]
    assert isinstance(strategy, NodeAffinitySchedulingStrategy)
    assert strategy.node_id == "a" * 56 and strategy.soft is False
    cfg = load_config(repo_root / "config" / "paper.yaml")
    launch = L.grpo_launch(
        cfg,
        dict(cfg["skin_rl"], temperature=1.0),
        "skin_rl",
        train_files="t.parquet",
        val_files="v.parquet",
        model_path="m",
        run_dir=tmp_path,
    )
    assert launch.validate().reward_model.launch_reward_fn_async is False

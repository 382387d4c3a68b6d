"""verl CPU mode: the patches (only in CPU mode), and real SFT / GRPO runs on CPU with the tiny model.

The slow tests check real training: verl 0.4.1's fsdp_sft_trainer under torchrun and main_ppo's GRPO loop with
Ray, FSDP2 and the HF rollout, with the project's reward file. The SFT and GRPO runs they read are those of the
session's CPU chain (tests/conftest.py::cpu_chain, trained once through Snakemake on the shipped examples); only
the resume checks train again (one more SFT step on a copy; a GRPO run killed after its first step).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from codegrpo.config import load_config
from codegrpo.verl import cpu

from tests.conftest import REPO_ROOT as REPO
from tests.verl import launch_files


def _py(code: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


# ---------------------------------------------------------------------------------------------------------
# helpers (the trained runs come from the session's CPU chain, tests/conftest.py::cpu_chain)


def tiny_cfg(steps: int = 2) -> dict:
    cfg = load_config(REPO / "config.yaml")
    cfg["sft"]["total_training_steps"] = steps
    for stage in ("skeleton_rl", "skin_rl"):
        cfg[stage].update(total_training_steps=steps, save_freq=1, test_freq=100, max_response_length=16)
    return cfg


def read_metrics(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# ---------------------------------------------------------------------------------------------------------
# CPU patches


def test_cpu_overrides_and_ray_settings():
    ov = cpu.grpo_overrides()
    assert "trainer.device=cpu" in ov and "actor_rollout_ref.rollout.name=hf" in ov
    assert "actor_rollout_ref.actor.strategy=fsdp2" in ov
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=1" in ov
    assert "model.strategy=fsdp2" in cpu.sft_overrides()
    kw = cpu.ray_init_kwargs(2, env_vars={"X": "1"})
    assert kw["num_gpus"] == 2 and kw["resources"] == {"cpu": 2} and kw["include_dashboard"] is False
    assert kw["runtime_env"]["worker_process_setup_hook"] == "codegrpo.verl.cpu.setup"
    assert kw["runtime_env"]["env_vars"]["X"] == "1"
    # joining a cluster whose nodes announce the resources themselves (Ray refuses resources from a joining driver)
    join = cpu.ray_init_kwargs(2, env_vars={"X": "1"}, address="10.0.0.1:6379")
    assert join["address"] == "10.0.0.1:6379" and not {"num_gpus", "num_cpus", "resources", "include_dashboard"} & set(
        join
    )
    assert join["runtime_env"] == kw["runtime_env"]
    assert cpu.node_resources(1, 4) == {"num_cpus": 4, "num_gpus": 1, "resources": {"cpu": 1}}


def test_trainer_forwards_the_jobs_threads_to_ray_workers(monkeypatch, tmp_path):
    """The thread counts Snakemake gives a training job reach verl's Ray workers through the runtime env, also
    when the driver joins a Ray started elsewhere (whose workers inherit that Ray's environment)."""
    from codegrpo.verl.launch import grpo_launch
    from codegrpo.verl.driver import THREAD_VARS, ray_init_kwargs

    cfg = tiny_cfg()
    g = grpo_launch(cfg, cfg["skeleton_rl"], "skeleton_rl", **launch_files(tmp_path)).validate()
    for name in (*THREAD_VARS, "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    assert not set(THREAD_VARS) & set(ray_init_kwargs(g)["runtime_env"]["env_vars"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    for address in (None, "127.0.0.1:1"):
        if address:
            monkeypatch.setenv("RAY_ADDRESS", address)
        kw = ray_init_kwargs(g)
        assert kw.get("address") == address
        assert kw["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == "1"
        assert kw["runtime_env"]["env_vars"]["MKL_NUM_THREADS"] == "1"


def test_setup_patches_verl_for_cpu(tmp_path):
    """In a fresh process: verl's CUDA assumptions fail before setup() and work after it."""
    from codegrpo.models import build_tiny_model

    build_tiny_model(tmp_path / "m", ["int f(int x) { return x; }"] * 20, vocab_size=300)
    r = _py(f"""
        import os, torch
        import verl.utils.device as d
        try:
            d.get_nccl_backend(); print("NCCL_OK")
        except RuntimeError as e:
            print("NCCL_RAISES")
        print("STUB_BEFORE", hasattr(torch.cpu, "memory_allocated"))
        from codegrpo.verl import cpu
        cpu.setup(); cpu.setup()  # idempotent
        print("BACKEND", d.get_nccl_backend(), cpu.is_applied(), os.environ[cpu.ENV_FLAG])
        print("STUB_AFTER", torch.cpu.memory_allocated(), torch.cpu.get_device_name())
        import transformers
        c = transformers.AutoConfig.from_pretrained({str(tmp_path / "m")!r}, attn_implementation="flash_attention_2")
        print("ATTN", c._attn_implementation)
        from verl.workers.sharding_manager.base import BaseShardingManager
        print("TIMING", BaseShardingManager.timing)
        import verl.workers.fsdp_workers as fw
        print("PIN", fw.CPUOffloadPolicy(pin_memory=True).pin_memory)
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1")
        dist.init_process_group("cpu:gloo,cpu:gloo")
        print("PG", dist.get_backend())
        dist.destroy_process_group()
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "NCCL_RAISES" in out and "STUB_BEFORE False" in out
    assert "BACKEND gloo True 1" in out and "STUB_AFTER 0 cpu" in out
    assert "ATTN sdpa" in out and "TIMING {}" in out and "PIN False" in out and "PG gloo" in out


def test_actor_keeps_gathered_weights_through_the_rollout_and_computes_the_same(tmp_path):
    """CPU mode launches the actor with FSDP2's ``reshard_after_forward=false``: the HF rollout's decode steps reuse
    the gathered (cast) weights instead of gathering and casting every layer again for every token. In a fresh
    process, with verl's own FSDP2 wrapping and mixed-precision policy (bf16 and fp32), two rollout + update
    steps give the same tokens, log-probs and weights, bit for bit, with either setting, and the kept weights
    are gathered far fewer times."""
    from codegrpo.models import build_tiny_model
    from codegrpo.services import free_port
    from codegrpo.verl.launch import grpo_launch

    cfg = tiny_cfg()
    composed = grpo_launch(cfg, cfg["skeleton_rl"], "skeleton_rl", **launch_files(tmp_path)).validate()
    assert composed.actor_rollout_ref.actor.fsdp_config.reshard_after_forward is False
    assert composed.actor_rollout_ref.ref.fsdp_config.reshard_after_forward is True  # verl's default, one pass
    build_tiny_model(
        tmp_path / "m", ["int f(int x) { return x + 1; }", "long g(void) { return 7; }"] * 20, vocab_size=300
    )
    r = _py(f"""
        import os, torch, torch.distributed as dist
        from codegrpo.verl import cpu
        cpu.setup()
        from torch.distributed.device_mesh import init_device_mesh
        from verl.utils.fsdp_utils import MixedPrecisionPolicy, apply_fsdp2
        from codegrpo.models import load_model
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{free_port()}", RANK="0", WORLD_SIZE="1")
        dist.init_process_group("gloo")
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
        # a probe, not a change: count the layer gathers FSDP2 performs
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
        gathers, wait = [0], FSDPParamGroup.wait_for_unshard

        def counting_wait(self):
            gathers[0] += self._all_gather_result is not None
            return wait(self)

        FSDPParamGroup.wait_for_unshard = counting_wait

        def run(dtype, reshard):
            model, tok = load_model({str(tmp_path / "m")!r})
            policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32, cast_forward_inputs=True)
            apply_fsdp2(model, {{"mesh": mesh, "mp_policy": policy, "reshard_after_forward": reshard}}, {{}})
            start = {{k: v.full_tensor().clone() for k, v in model.state_dict().items()}}
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            prompt = torch.tensor([tok("int f(int x)").input_ids] * 3)
            trace = []
            for step in range(2):
                model.eval()
                torch.manual_seed(step)
                with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                    seq = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True,
                                         max_new_tokens=12, pad_token_id=tok.pad_token_id or 0)
                model.train()
                with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                    logits = model(seq).logits
                lp = logits.float().log_softmax(-1)[:, :-1].gather(-1, seq[:, 1:, None]).squeeze(-1)
                (-lp.mean()).backward()
                opt.step()
                opt.zero_grad()
                trace.append((seq.tolist(), lp.detach(), seq.shape[1] - prompt.shape[1]))
            weights = {{k: v.full_tensor() for k, v in model.state_dict().items()}}
            n, gathers[0] = gathers[0], 0
            moved = any(not torch.equal(start[k], weights[k]) for k in start)
            return trace, weights, n, moved

        for dtype in (torch.bfloat16, torch.float32):
            (t1, w1, g1, moved), (t2, w2, g2, _) = run(dtype, True), run(dtype, False)
            same_tokens = [a[0] for a in t1] == [b[0] for b in t2]
            same_lp = all(torch.equal(a[1], b[1]) for a, b in zip(t1, t2))
            same_w = w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)
            print("SAME", str(dtype), same_tokens, same_lp, same_w, moved, min(a[2] for a in t1), g1, g2)
        dist.destroy_process_group()
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith("SAME")]
    assert [line.split()[1] for line in lines] == ["torch.bfloat16", "torch.float32"]
    for line in lines:
        _, _, tokens, logprobs, weights, moved, new_tokens, resharding, kept = line.split()
        assert (tokens, logprobs, weights) == ("True", "True", "True"), line
        assert moved == "True" and int(new_tokens) > 0, line  # the updates changed the weights; tokens were sampled
        # resharding after every forward gathers each layer again for each decoded token; kept: once per update
        assert int(kept) * 4 < int(resharding), line


def test_precision_resolves_from_the_cpus_instructions(monkeypatch):
    assert cpu.resolve_precision("bf16") == "bf16" and cpu.resolve_precision("fp32") == "fp32"
    monkeypatch.setattr(cpu, "native_bf16", lambda: True)
    assert cpu.resolve_precision("auto") == "bf16"
    monkeypatch.setattr(cpu, "native_bf16", lambda: False)
    assert cpu.resolve_precision("auto") == "fp32"
    with pytest.raises(ValueError, match="cpu_precision must be one of auto, bf16, fp32, got 'fp16'"):
        cpu.resolve_precision("fp16")


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_launch_carries_the_precision_to_verl_and_its_workers(precision, monkeypatch, tmp_path):
    """The resolved precision travels in the Hydra config (no variable of its own), the driver names the matching
    setup hook for every Ray worker (a local Ray or one it joins), the SFT entry point reads the same key, and in
    fp32 the reference model is loaded in float32 (verl's default for it is bfloat16)."""
    from codegrpo.verl.launch import grpo_launch, sft_launch
    from codegrpo.verl.driver import ray_init_kwargs

    hook = {"bf16": cpu.WORKER_SETUP_HOOK, "fp32": cpu.WORKER_SETUP_HOOK_FP32}[precision]
    cfg = {**tiny_cfg(), "cpu_precision": precision}
    launch = grpo_launch(cfg, cfg["skeleton_rl"], "skeleton_rl", **launch_files(tmp_path))
    composed = launch.validate()
    assert composed.codegrpo.cpu_precision == precision
    ref_dtype = composed.actor_rollout_ref.ref.fsdp_config.get("model_dtype")
    assert ref_dtype == ("fp32" if precision == "fp32" else None)
    for address in (None, "127.0.0.1:1"):
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        if address:
            monkeypatch.setenv("RAY_ADDRESS", address)
        assert ray_init_kwargs(composed)["runtime_env"]["worker_process_setup_hook"] == hook
    assert sft_launch(cfg, "skeleton", **launch_files(tmp_path)).validate().codegrpo.cpu_precision == precision
    assert not [k for k in launch.env if "PRECISION" in k]


def test_fp32_precision_keeps_verls_compute_in_float32():
    """In fresh processes: with fp32, setup() makes verl's bfloat16 autocast and FSDP2 policy compute in float32
    (the SFT trainer imported after setup included); with bf16 both stay as verl has them."""
    code = """
        import sys, torch
        from codegrpo.verl import cpu
        if sys.argv[1] == "fp32":
            cpu.setup_fp32()  # the Ray worker hook of fp32 runs
        else:
            cpu.setup(sys.argv[1])
        a = torch.randn(4, 8)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            print("AUTOCAST", (a @ a.T).dtype)
        import verl.utils.fsdp_utils as fu
        import verl.workers.fsdp_workers as fw
        import verl.trainer.fsdp_sft_trainer as st
        for m in (fu, fw, st):
            p = m.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            print("POLICY", p.param_dtype, p.reduce_dtype)
        print("WORKERS_BACKEND", fw.get_nccl_backend())  # the name the workers bound: patched before their import
    """
    for precision, dtype in (("fp32", "torch.float32"), ("bf16", "torch.bfloat16")):
        r = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), precision],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=REPO,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"AUTOCAST {dtype}" in r.stdout, r.stdout
        assert r.stdout.count(f"POLICY {dtype} torch.float32") == 3, r.stdout
        assert "WORKERS_BACKEND gloo" in r.stdout, r.stdout


def test_gpu_mode_applies_no_cpu_patch(tmp_path):
    """The GPU path (paper config) composes, prepares SFT and Ray without loading CPU mode."""
    r = _py(f"""
        import sys
        from codegrpo.config import load_config
        from codegrpo.verl import launch
        from codegrpo.verl.driver import ray_init_kwargs
        from codegrpo.verl import sft_main
        cfg = load_config("config/paper.yaml")
        g = launch.grpo_launch(cfg, cfg["skeleton_rl"], "skeleton_rl", train_files="t.parquet", val_files="v.parquet",
                               model_path="/m", run_dir={str(tmp_path / "r")!r}).validate()
        kw = ray_init_kwargs(g)
        s = launch.sft_launch(cfg, "skeleton", train_files="t.parquet", val_files="v.parquet",
                              model_path="/m", run_dir={str(tmp_path / "s")!r}).validate()
        print("RESUME_STEP", sft_main.configure(s))
        import verl.utils.device as d
        try:
            d.get_nccl_backend(); print("NCCL_OK")
        except RuntimeError:
            print("NCCL_RAISES")
        print("CPU_MODULE", "codegrpo.verl.cpu" in sys.modules)
        print("HOOK", "worker_process_setup_hook" in kw["runtime_env"], "num_gpus" in kw)
        print("DEVICE", g.trainer.device, g.actor_rollout_ref.rollout.name)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RESUME_STEP 0" in r.stdout and "NCCL_RAISES" in r.stdout
    assert "CPU_MODULE False" in r.stdout and "HOOK False False" in r.stdout and "DEVICE cuda vllm" in r.stdout


# ---------------------------------------------------------------------------------------------------------
# real runs


@pytest.fixture(scope="module")
def sft_run(cpu_chain):
    """sft_skeleton of the session's CPU chain (tests/conftest.py::cpu_chain: config.yaml, 2 steps)."""
    cpu_chain.check()
    run_dir = cpu_chain.runs / "sft_skeleton"
    return run_dir, json.loads((run_dir / "done.json").read_text())


@pytest.mark.slow
def test_sft_two_steps_on_cpu(sft_run, cpu_chain):
    import torch

    from codegrpo.models import load_model

    run_dir, done = sft_run
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert all("train/loss" in r for r in rows) and "val/loss" in rows[-1]
    assert done["final_step"] == 2 and json.loads((run_dir / "done.json").read_text()) == done
    assert done["chat_template"] == "passthrough"  # config.yaml's model.chat_template, as resolved for the run
    trained, tok = load_model(run_dir / "hf")
    init, _ = load_model(done["init_model"])
    assert done["init_model"] == str(cpu_chain.results / "models" / "tiny")
    assert not torch.equal(trained.model.embed_tokens.weight, init.model.embed_tokens.weight)
    assert tok.chat_template and (run_dir / "train.log").read_text().count("step:2") >= 1


@pytest.mark.slow
def test_grpo_two_steps_on_cpu(sft_run, cpu_chain):
    """GRPO (skeleton_rl of the CPU chain) from the SFT output with the structure reward; FSDP checkpoint exported
    to Hugging Face."""
    from codegrpo.models import load_model

    sft_dir, _ = sft_run
    run_dir = cpu_chain.runs / "skeleton_rl"
    cfg = cpu_chain.config
    done = json.loads((run_dir / "done.json").read_text())
    assert done["init_model"] == str(sft_dir / "hf")
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for key in (
            "critic/score/mean",
            "actor/kl_loss",
            "actor/pg_loss",
            "response_length/mean",
            "reward/score/mean",
            "reward/compile/mean",
        ):
            assert key in r, key
        assert r["response_length/max"] <= cfg["skeleton_rl"]["max_response_length"]
    assert any(k.startswith("val-core/sk2decompile_structure/") for k in rows[-1])
    assert done["final_step"] == 2 and (run_dir / "checkpoints" / "global_step_2" / "actor").is_dir()
    assert json.loads((run_dir / "settings.json").read_text())["settings"]["chat_template"] == "passthrough"
    # where verl placed its training worker (the local Ray of CPU mode: one node, one fake GPU)
    workers = json.loads((run_dir / "workers.json").read_text())
    assert workers["world_size"] == cfg["skeleton_rl"]["n_gpus_per_node"] and workers["nodes"] == 1
    assert workers["workers"][0]["rank"] == 0 and workers["workers"][0]["pid"] > 0
    model, tok = load_model(run_dir / "hf")
    assert type(model).__name__ == "Qwen2ForCausalLM" and tok.eos_token == "<|im_end|>"


@pytest.mark.slow
def test_sft_rerun_resumes_from_newest_weights(sft_run, cpu_chain, tmp_path):
    """A rerun with more steps continues from global_step_2: steps 1-2 are kept, only step 3 is trained (on a copy
    of the chain's sft_skeleton, with the chain's data and initial model)."""
    import shutil

    from codegrpo.verl.stages import run_sft

    src, done0 = sft_run
    run_dir = tmp_path / "sft_skeleton"
    shutil.copytree(src, run_dir)
    before = read_metrics(run_dir)
    data = cpu_chain.results / "data" / "sft"
    cfg = tiny_cfg(steps=3)
    cfg["results_dir"] = str(cpu_chain.results)
    done = run_sft(
        cfg,
        "skeleton",
        train_files=data / "skeleton.train.parquet",
        val_files=data / "skeleton.val.parquet",
        init_model=done0["init_model"],
        run_dir=run_dir,
    )
    after = read_metrics(run_dir)
    assert [r["step"] for r in after] == [1, 2, 3] and after[:2] == before
    assert done["final_step"] == 3 and (run_dir / "checkpoints" / "global_step_3" / "model.safetensors").is_file()
    log = (run_dir / "train.log").read_text()
    assert "resuming SFT from" in log and "global_step_2 (step 2)" in log


@pytest.mark.slow
def test_grpo_resumes_after_kill(cpu_chain, shared_ray, tmp_path):
    """Kill a run after its first checkpoint; the rerun resumes there; no step is lost or duplicated (skeleton_rl
    from the CPU chain's tiny model on its data)."""
    from codegrpo.verl import checkpoints
    from codegrpo.verl.grpo_settings import prepare_run_dir, run_settings, settings_launch
    from codegrpo.verl.stages import chat_template_choice, run_grpo

    cpu_chain.check()
    cfg = tiny_cfg(steps=3)
    run_dir = (tmp_path / "skeleton_rl").resolve()
    data = cpu_chain.results / "data" / "rl"
    kw = dict(
        train_files=data / "skeleton.train.parquet",
        val_files=data / "skeleton.val.parquet",
        init_model=str(cpu_chain.results / "models" / "tiny"),
        run_dir=run_dir,
    )
    # the first attempt starts the way run_grpo does (settings.json, then verl), and is killed after step 1
    settings = run_settings(
        cfg,
        cfg["skeleton_rl"],
        "skeleton_rl",
        **kw,
        chat_template=chat_template_choice(cfg, "skeleton_rl", kw["init_model"]),
    )
    assert prepare_run_dir(run_dir, settings) == "fresh"
    la = settings_launch(cfg, settings, run_dir)
    with open(run_dir / "train.log", "w") as log:  # both attempts join the session's Ray (the kill ends the job)
        proc = subprocess.Popen(
            la.argv,
            env={**os.environ, **shared_ray.env, **la.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.time() + 400
        while time.time() < deadline and proc.poll() is None:
            if checkpoints.latest_step(run_dir / "checkpoints") == 1:
                break
            time.sleep(0.5)
        assert checkpoints.latest_step(run_dir / "checkpoints") == 1, (run_dir / "train.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)  # Ray processes of that session
    assert not (run_dir / "done.json").exists()
    before = [r["step"] for r in read_metrics(run_dir)]
    assert before[0] == 1 and before == sorted(set(before))

    with shared_ray.joined():
        done = run_grpo(cfg, cfg["skeleton_rl"], "skeleton_rl", **kw)
    steps = [r["step"] for r in read_metrics(run_dir)]
    assert steps == [1, 2, 3]
    assert not list(run_dir.parent.glob("skeleton_rl.prev-*")), "the rerun started fresh instead of resuming"
    log = (run_dir / "train.log").read_text()
    assert "Resuming from" in log and "global_step_1" in log
    assert done["final_step"] == 3 and (run_dir / "hf" / "model.safetensors").is_file()


@pytest.mark.slow
def test_skin_rl_reward_uses_the_served_endpoint_from_settings_json(cpu_chain):
    """skin_rl with embedding.serve (the session's CPU chain, tests/conftest.py::cpu_chain): the run starts the
    project's embedding server, records its endpoint in settings.json, and the identifier reward in verl's
    TaskRunner embeds through it (the server's access log shows the requests). A stale
    CODEGRPO_EMBEDDING_API_BASE in the caller's environment (the chain's snakemake) is not used."""
    cpu_chain.check()
    run_dir = cpu_chain.runs / "skin_rl"
    assert json.loads((run_dir / "done.json").read_text())["final_step"] == 2
    doc = json.loads((run_dir / "settings.json").read_text())
    assert doc["settings"]["embedding"]["serve"] is True
    served = doc["served"]["embedding"]
    assert served["backend"] == "openai" and served["api_base"].startswith("http://127.0.0.1:")
    assert served["api_base"] != cpu_chain.stale_api_base
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2] and all("reward/cosine/mean" in r for r in rows)
    assert (run_dir / "embedding_server.log").read_text().count("POST /v1/embeddings") >= 2


def test_ray_rehearsal_record_demands_workers_on_every_node(tmp_path):
    """ray_rehearsal.json is written only when verl's training workers (the run's workers.json) ran on every
    Ray node of the rehearsal; the driver's environment is not stored."""
    import json

    from codegrpo.cluster import ClusterError
    from codegrpo.cluster.rehearsal import RAY_REHEARSAL_FILE, write_ray_rehearsal
    from codegrpo.verl.driver import WORKERS_FILE

    record = {
        "job_id": "7",
        "ray_nodes": 2,
        "expected_nodes": 2,
        "tasks": [{"node_id": "a"}, {"node_id": "b"}],
        "env": {"RAY_ADDRESS": "127.0.0.1:1"},
    }
    with pytest.raises(ClusterError, match="0 of the 2 Ray nodes"):  # no workers.json: training never placed
        write_ray_rehearsal(tmp_path, record, WORKERS_FILE)
    one = [{"rank": 0, "node_id": "a"}, {"rank": 1, "node_id": "a"}]
    (tmp_path / WORKERS_FILE).write_text(json.dumps({"world_size": 2, "nodes": 1, "workers": one}))
    with pytest.raises(ClusterError, match="1 of the 2 Ray nodes"):
        write_ray_rehearsal(tmp_path, record, WORKERS_FILE)
    assert not (tmp_path / RAY_REHEARSAL_FILE).exists()
    two = [{"rank": 0, "node_id": "a"}, {"rank": 1, "node_id": "b"}]
    (tmp_path / WORKERS_FILE).write_text(json.dumps({"world_size": 2, "nodes": 2, "workers": two}))
    write_ray_rehearsal(tmp_path, record, WORKERS_FILE)
    saved = json.loads((tmp_path / RAY_REHEARSAL_FILE).read_text())
    assert saved["training_nodes"] == 2 and saved["training_workers"]["workers"] == two and "env" not in saved


@pytest.mark.parametrize(
    "plan,expect",
    [
        ({}, 2),  # two training jobs, two cores
        ({"n_training_jobs": 5}, 2),  # never more slots than cores
        ({"n_training_jobs": 1}, 1),
        ({"cores": None, "n_training_jobs": 3}, 1),
        ({"n_training_jobs": 0}, 0),  # nothing trains: no Ray
        ({"enabled": False}, 0),  # pipeline_ray: false
        ({"device": "gpu"}, 0),
        ({"executor": "slurm"}, 0),  # jobs on other nodes cannot join a Ray of the submit host
    ],
)
def test_pipeline_ray_slots(plan, expect, monkeypatch):
    from codegrpo.verl.cpu import PipelineRay

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    full = {"enabled": True, "device": "cpu", "executor": "local", "n_training_jobs": 2, "cores": 2, **plan}
    assert PipelineRay.slots(**full) == expect
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # a Ray to join exists already (tests, a SLURM job)
    assert PipelineRay.slots(**full) == 0

"""The checks of the cluster smoke test (:mod:`codegrpo.smoke`, rule ``smoke``, docs/cluster.md). Each runs in a
child process (``python -m codegrpo.smoke check codegrpo.smoke_checks:<function> ...``) and returns a JSON-able
detail dict or raises."""

from __future__ import annotations

import importlib
import json
import os
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any, Mapping


# config sections the GRPO check's run_grpo reads (the training sections for its preflight, the reward's settings)
GRPO_SECTIONS = ("device", "seed", "cluster", "sft", "skeleton_rl", "skin_rl", "compile_reward")


def check_import(module: str) -> dict:
    """``import module``; the detail names its version and file."""
    mod = importlib.import_module(module)
    top = importlib.import_module(module.split(".")[0])
    return {"module": module, "version": getattr(top, "__version__", None), "file": getattr(mod, "__file__", None)}


def check_sandbox(section: Mapping[str, Any]) -> dict:
    """Which isolation the sandbox gets on this node (bwrap namespaces or resource limits only, a private uid per
    job or not); fails when ``sandbox.require_namespaces`` is set and namespaces are not available."""
    from codegrpo.sandbox import bwrap
    from codegrpo.sandbox.client import require_isolation

    info = bwrap.sandbox_info()
    require_isolation(section)
    return {
        "mechanism": info.mechanism,
        "private_uid": info.private_uid,
        "reason": info.reason,
        "require_namespaces": bool(section.get("require_namespaces")),
    }


def check_tiny_model(
    out_dir: str, data_dir: str, hidden_size: int = 256, num_layers: int = 2, vocab_size: int = 1024, seed: int = 0
) -> dict:
    """The smoke's own inputs, offline and in seconds: the learning checks' toy task as verl RL parquet files
    (``data_dir``: toy.train / toy.val, scored by the toy reward) and a tiny random Qwen2 with 4 attention heads
    (head size ``hidden_size / 4``: 64 by default, which vLLM's and flash-attn's kernels support)."""
    from codegrpo import learning
    from codegrpo.models import build_tiny_model

    files = learning.write_toy_dataset(data_dir, n_train=64, n_val=8, seed=seed)
    path = build_tiny_model(
        out_dir,
        learning.toy_corpus(seed),
        arch="qwen2",
        vocab_size=vocab_size,
        seed=seed,
        hidden_size=hidden_size,
        num_layers=num_layers,
        max_position_embeddings=4096,
    )
    return {"model_dir": str(path), "train": str(files["train"]), "val": str(files["val"])}


def check_vllm_engine(model_dir: str, gpu_memory_utilization: float = 0.3, max_new_tokens: int = 16) -> dict:
    """One vLLM engine on ``model_dir`` generates for two prompts, then shuts down."""
    from codegrpo.eval.generate import GenerationSettings, VLLMGenerator

    settings = GenerationSettings(
        max_new_tokens=max_new_tokens, max_prompt_tokens=256, gpu_memory_utilization=gpu_memory_utilization
    )
    t0 = time.monotonic()
    gen = VLLMGenerator(model_dir, settings)
    startup = time.monotonic() - t0
    try:
        out = gen.generate(["int func0(int var1) {", "void func1(char *var2) {"], desc="smoke")
    finally:
        gen.close()
    if len(out) != 2 or not all(len(x) == 1 for x in out):
        raise RuntimeError(f"vLLM returned {len(out)} results for 2 prompts: {out!r}")
    return {"engine_startup_s": round(startup, 1), "samples": [x[0][:80] for x in out]}


def _port_open(url: str) -> bool:
    host_port = url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, int(port))) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def check_embedding_server(section: Mapping[str, Any], log_path: str) -> dict:
    """Start the configured embedding server, embed two strings through ``/v1/embeddings``, stop it; the server's
    process group must be gone and its port closed afterwards."""
    from codegrpo.services import embedding_service

    section = {**dict(section), "serve": True}
    svc = embedding_service(section, log_path=log_path)
    t0 = time.monotonic()
    with svc:
        startup = time.monotonic() - t0
        pid, base = svc.pid, svc.env["CODEGRPO_EMBEDDING_API_BASE"]
        body = json.dumps(
            {"model": svc.env["CODEGRPO_EMBEDDING_MODEL"], "input": ["int count, char *buffer", "int cnt, char *buf"]}
        ).encode()
        req = urllib.request.Request(f"{base}/embeddings", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=float(section.get("timeout_s", 60))) as resp:
            data = json.load(resp)["data"]
    vecs = [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]
    if len(vecs) != 2 or len(vecs[0]) != len(vecs[1]) or not vecs[0]:
        raise RuntimeError(f"expected 2 embeddings of one dimension, got {[len(v) for v in vecs]}")
    from codegrpo.rewards.sk2d import cosine

    cos = cosine(vecs[0], vecs[1])
    deadline = time.monotonic() + 10
    while (_alive(pid) or _port_open(base)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        raise RuntimeError(f"embedding server pid {pid} still running after stop")
    if _port_open(base):
        raise RuntimeError(f"{base} still accepts connections after stop")
    return {
        "startup_s": round(startup, 1),
        "dim": len(vecs[0]),
        "cosine": round(cos, 4),
        "api_base": base,
        "stopped": True,
    }


def smoke_grpo_config(cfg: Mapping[str, Any], smoke: Mapping[str, Any], device: str = "gpu") -> dict:
    """The config whose ``skeleton_rl`` section holds the smoke's GRPO run: one GPU, vLLM rollout, 2 steps.

    ``device`` is gpu whatever the run's device: the check is of the GPU path (CPU mode swaps the vLLM rollout for
    transformers); cpu only to test the check's own code on a machine without a GPU.
    """
    from codegrpo.learning import short_grpo_config

    g = smoke["grpo"]
    out = short_grpo_config(
        cfg,
        g,
        filter_overlong_prompts=True,
        rollout_name="vllm",
        tensor_model_parallel_size=1,
        gpu_memory_utilization=g["gpu_memory_utilization"],
        logger=["console"],
        nnodes=1,
        n_gpus_per_node=1,
        param_offload=False,
        optimizer_offload=False,
        ref_param_offload=False,
        overrides=[],
    )
    out["device"] = device
    return out


def check_grpo(
    cfg: Mapping[str, Any],
    smoke: Mapping[str, Any],
    train: str,
    val: str,
    model_dir: str,
    run_dir: str,
    device: str = "gpu",
) -> dict:
    """``smoke.grpo.steps`` GRPO steps of verl with the vLLM rollout on the tiny model; the run's checkpoint is
    exported and its metrics hold one line per step. (``device`` cpu: verl's CPU mode, to test this code.)"""
    import torch

    from codegrpo.verl.stages import run_grpo

    if device == "gpu" and not torch.cuda.is_available():  # else Ray would wait for a GPU until the time limit
        raise RuntimeError(
            "no CUDA device visible to torch (torch.cuda.is_available() is False): the GRPO check "
            f"runs verl's vLLM rollout on a GPU (torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    gcfg = smoke_grpo_config(cfg, smoke, device)
    # the compile reward's settings reach verl's workers through the run's settings.json (run_grpo)
    done = run_grpo(
        gcfg, gcfg["skeleton_rl"], "smoke_grpo", train_files=train, val_files=val, init_model=model_dir, run_dir=run_dir
    )
    steps = []
    metrics = Path(run_dir) / "metrics.jsonl"
    if metrics.exists():
        steps = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    if len(steps) < int(smoke["grpo"]["steps"]):
        raise RuntimeError(f"{metrics}: {len(steps)} step(s) logged, expected {smoke['grpo']['steps']}")
    last = steps[-1]
    return {
        "steps": len(steps),
        "hf": str(Path(run_dir) / "hf"),
        "done": {k: done.get(k) for k in ("run", "kind")},
        "last_step": {
            k: last[k] for k in sorted(last) if k.startswith(("critic/score", "timing_s/step", "training/global_step"))
        },
    }


def check_eval_batch(
    model_dir: str,
    data: str,
    out_path: str,
    batch_size: int = 4,
    max_new_tokens: int = 32,
    gpu_memory_utilization: float = 0.3,
    workers: int = 2,
    backend: str = "vllm",
) -> dict:
    """One evaluation batch (``batch_size`` O0 tasks) through the vLLM backend (``backend``: the generation
    backend, vllm for the smoke test), scored by re-execution."""
    from codegrpo.eval.decompile import run_system
    from codegrpo.eval.generate import GenerationSettings

    settings = GenerationSettings(
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        max_prompt_tokens=1024,
        use_chat_template=True,
        gpu_memory_utilization=gpu_memory_utilization,
    )
    res = run_system(
        "smoke",
        model_dir,
        None,
        data,
        out_path,
        settings=settings,
        backend=backend,
        levels=("O0",),
        tasks_per_level=batch_size,
        workers=workers,
    )
    if res["backend"] != backend:
        raise RuntimeError(f"evaluation ran on backend {res['backend']!r}, not {backend}")
    if len(res["records"]) != batch_size:
        raise RuntimeError(f"{len(res['records'])} tasks evaluated, expected {batch_size}")
    return {
        "tasks": len(res["records"]),
        "backend": res["backend"],
        "seconds": res.get("seconds"),
        "out": str(out_path),
    }

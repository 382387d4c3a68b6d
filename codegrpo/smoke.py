"""Smoke test of a new cluster on one GPU node (rule ``smoke``, docs/cluster.md): does the GPU stack work here?

Each check is a function; :func:`run_smoke` runs them in order, each in its own process (a crash, a hang or
an import error of one check cannot take the others down; a vLLM engine frees its GPU memory when its process
ends) with a time limit, and :func:`write_report` writes ``report.md`` / ``report.json`` with, per check,
``ok`` / ``failed``, the seconds it took and the error. The checks (in the order they run):

1. ``tiny_model``: the smoke's own inputs, offline: the toy task of the learning checks (verl RL parquet, toy
   reward) and a tiny random Qwen2 with vLLM/flash-attn-friendly attention heads (head size 64);
2. ``import_verl_workers``, ``import_vllm``, ``import_flash_attn``: the GPU stack imports;
3. ``vllm_engine``: one vLLM engine on the tiny model generates, and shuts down;
4. ``embedding_server``: the configured embedding server (:func:`codegrpo.services.embedding_service`: vLLM
   with ``embedding.serve``, else the project's CPU server) starts, answers ``/v1/embeddings``, and stops with
   nothing left running;
5. ``grpo_vllm``: 2 GRPO steps of verl with the vLLM rollout on the tiny model (the toy task and its reward,
   :func:`codegrpo.verl.stages.run_grpo`, the pipeline's GRPO lifecycle), exported as a checkpoint;
6. ``eval_vllm``: one evaluation batch (HumanEval-Decompile tasks) through the vLLM generation backend and
   the re-executability sandbox (:func:`codegrpo.eval.decompile.run_system`).

A check is named by ``module:function`` and called with keyword arguments (JSON); ``python -m codegrpo.smoke
check <module:function> <kwargs.json> <result.json>`` is what runs in the child process.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.io import atomic_open, write_json
from codegrpo.procgroup import kill_group, popen_group

log = logging.getLogger(__name__)

__all__ = [
    "Check",
    "CheckResult",
    "check_embedding_server",
    "check_eval_batch",
    "check_grpo",
    "check_import",
    "check_tiny_model",
    "check_vllm_engine",
    "plan_checks",
    "run_check",
    "run_smoke",
    "write_report",
]

OK, FAILED = "ok", "failed"
# config sections the GRPO check's run_grpo reads (the training sections for its preflight, the reward's settings)
GRPO_SECTIONS = ("device", "seed", "cluster", "sft", "skeleton_rl", "skin_rl", "compile_reward")


@dataclass(frozen=True)
class Check:
    """One check: its name, the ``module:function`` that runs it, its keyword arguments, its time limit."""

    name: str
    target: str
    kwargs: dict = field(default_factory=dict)
    timeout_s: float = 600.0


@dataclass
class CheckResult:
    name: str
    status: str  # ok | failed
    seconds: float
    error: str = ""
    detail: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------
# The checks (each runs in a child process; returns a JSON-able detail dict or raises)


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
    return {"mechanism": info.mechanism, "private_uid": info.private_uid, "reason": info.reason,
            "require_namespaces": bool(section.get("require_namespaces"))}


def check_tiny_model(out_dir: str, data_dir: str, hidden_size: int = 256, num_layers: int = 2,
                     vocab_size: int = 1024, seed: int = 0) -> dict:
    """The smoke's own inputs, offline and in seconds: the learning checks' toy task as verl RL parquet files
    (``data_dir``: toy.train / toy.val, scored by the toy reward) and a tiny random Qwen2 with 4 attention heads
    (head size ``hidden_size / 4``: 64 by default, which vLLM's and flash-attn's kernels support)."""
    from codegrpo import learning
    from codegrpo.models import build_tiny_model

    files = learning.write_toy_dataset(data_dir, n_train=64, n_val=8, seed=seed)
    path = build_tiny_model(out_dir, learning.toy_corpus(seed), arch="qwen2", vocab_size=vocab_size, seed=seed,
                            hidden_size=hidden_size, num_layers=num_layers, max_position_embeddings=4096)
    return {"model_dir": str(path), "train": str(files["train"]), "val": str(files["val"])}


def check_vllm_engine(model_dir: str, gpu_memory_utilization: float = 0.3, max_new_tokens: int = 16) -> dict:
    """One vLLM engine on ``model_dir`` generates for two prompts, then shuts down."""
    from codegrpo.eval.generate import GenerationSettings, VLLMGenerator

    settings = GenerationSettings(max_new_tokens=max_new_tokens, max_prompt_tokens=256,
                                  gpu_memory_utilization=gpu_memory_utilization)
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
        body = json.dumps({"model": svc.env["CODEGRPO_EMBEDDING_MODEL"],
                           "input": ["int count, char *buffer", "int cnt, char *buf"]}).encode()
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
    return {"startup_s": round(startup, 1), "dim": len(vecs[0]), "cosine": round(cos, 4), "api_base": base,
            "stopped": True}


def smoke_grpo_config(cfg: Mapping[str, Any], smoke: Mapping[str, Any], device: str = "gpu") -> dict:
    """The config whose ``skeleton_rl`` section holds the smoke's GRPO run: one GPU, vLLM rollout, 2 steps.

    ``device`` is gpu whatever the run's device: the check is of the GPU path (CPU mode swaps the vLLM rollout for
    transformers); cpu only to test the check's own code on a machine without a GPU.
    """
    import copy

    g = dict(smoke["grpo"])
    out = copy.deepcopy(dict(cfg))
    out["device"] = device
    section = dict(out["skeleton_rl"])
    steps = int(g["steps"])
    section.update({
        "import": None, "train_batch_size": g["train_batch_size"], "n": g["n"],
        "ppo_mini_batch_size": g["train_batch_size"], "ppo_micro_batch_size_per_gpu": g["train_batch_size"],
        "ref_log_prob_micro_batch_size_per_gpu": g["train_batch_size"],
        "rollout_log_prob_micro_batch_size_per_gpu": g["train_batch_size"],
        "max_prompt_length": g["max_prompt_length"], "max_response_length": g["max_response_length"],
        "filter_overlong_prompts": True, "rollout_name": "vllm", "tensor_model_parallel_size": 1,
        "gpu_memory_utilization": g["gpu_memory_utilization"], "total_training_steps": steps, "total_epochs": steps,
        "save_freq": steps, "test_freq": steps + 1, "val_before_train": False, "logger": ["console"],
        "nnodes": 1, "n_gpus_per_node": 1, "param_offload": False, "optimizer_offload": False,
        "ref_param_offload": False, "gradient_checkpointing": False,
        "reward": {"manager": "naive", "function": "compute_score"}, "overrides": [],
    })
    out["skeleton_rl"] = section
    return out


def check_grpo(cfg: Mapping[str, Any], smoke: Mapping[str, Any], train: str, val: str, model_dir: str,
               run_dir: str, device: str = "gpu") -> dict:
    """``smoke.grpo.steps`` GRPO steps of verl with the vLLM rollout on the tiny model; the run's checkpoint is
    exported and its metrics hold one line per step. (``device`` cpu: verl's CPU mode, to test this code.)"""
    import torch

    from codegrpo.verl.stages import run_grpo

    if device == "gpu" and not torch.cuda.is_available():  # else Ray would wait for a GPU until the time limit
        raise RuntimeError("no CUDA device visible to torch (torch.cuda.is_available() is False): the GRPO check "
                           f"runs verl's vLLM rollout on a GPU (torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
                           f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    gcfg = smoke_grpo_config(cfg, smoke, device)
    # the compile reward's settings reach verl's workers through the run's settings.json (run_grpo)
    done = run_grpo(gcfg, gcfg["skeleton_rl"], "smoke_grpo", train_files=train, val_files=val,
                    init_model=model_dir, run_dir=run_dir)
    steps = []
    metrics = Path(run_dir) / "metrics.jsonl"
    if metrics.exists():
        steps = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    if len(steps) < int(smoke["grpo"]["steps"]):
        raise RuntimeError(f"{metrics}: {len(steps)} step(s) logged, expected {smoke['grpo']['steps']}")
    last = steps[-1]
    return {"steps": len(steps), "hf": str(Path(run_dir) / "hf"), "done": {k: done.get(k) for k in ("run", "kind")},
            "last_step": {k: last[k] for k in sorted(last) if k.startswith(("critic/score", "timing_s/step",
                                                                               "training/global_step"))}}


def check_eval_batch(model_dir: str, data: str, out_path: str, batch_size: int = 4, max_new_tokens: int = 32,
                     gpu_memory_utilization: float = 0.3, workers: int = 2, backend: str = "vllm") -> dict:
    """One evaluation batch (``batch_size`` O0 tasks) through the vLLM backend (``backend``: the generation
    backend, vllm for the smoke test), scored by re-execution."""
    from codegrpo.eval.decompile import run_system
    from codegrpo.eval.generate import GenerationSettings

    settings = GenerationSettings(max_new_tokens=max_new_tokens, batch_size=batch_size, max_prompt_tokens=1024,
                                  use_chat_template=True, gpu_memory_utilization=gpu_memory_utilization)
    res = run_system("smoke", model_dir, None, data, out_path, settings=settings, backend=backend, levels=("O0",),
                     tasks_per_level=batch_size, workers=workers)
    if res["backend"] != backend:
        raise RuntimeError(f"evaluation ran on backend {res['backend']!r}, not {backend}")
    if len(res["records"]) != batch_size:
        raise RuntimeError(f"{len(res['records'])} tasks evaluated, expected {batch_size}")
    return {"tasks": len(res["records"]), "backend": res["backend"], "seconds": res.get("seconds"),
            "out": str(out_path)}


# ----------------------------------------------------------------------------------------------------------
# Running checks


def _resolve(target: str):
    module, _, func = target.partition(":")
    if not module or not func:
        raise ValueError(f"check target {target!r} is not module:function")
    return getattr(importlib.import_module(module), func)


def _child(target: str, kwargs_file: str, result_file: str) -> int:
    """Child process: run one check, write {"status", "detail" | "error"} to ``result_file``."""
    kwargs = json.loads(Path(kwargs_file).read_text())
    try:
        detail = _resolve(target)(**kwargs)
        out = {"status": OK, "detail": detail if isinstance(detail, dict) else {"result": repr(detail)[:2000]}}
    except BaseException as exc:  # noqa: BLE001 - the report carries it, whatever it is
        out = {"status": FAILED, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    write_json(result_file, out)
    return 0 if out["status"] == OK else 1


def run_check(check: Check, work_dir: str | os.PathLike, env: Mapping[str, str] | None = None) -> CheckResult:
    """Run ``check`` in a child process (own process group, killed whole at the time limit)."""
    work = Path(work_dir) / check.name
    work.mkdir(parents=True, exist_ok=True)
    kwargs_file, result_file, log_file = work / "kwargs.json", work / "result.json", work / "check.log"
    result_file.unlink(missing_ok=True)
    write_json(kwargs_file, check.kwargs)
    t0 = time.monotonic()
    timed_out = False
    with open(log_file, "wb") as out:
        proc = popen_group([sys.executable, "-m", "codegrpo.smoke", "check", check.target, str(kwargs_file),
                            str(result_file)], stdout=out, stderr=subprocess.STDOUT,
                           env={**os.environ, **(env or {})})
        try:
            returncode = proc.wait(timeout=check.timeout_s)
            kill_group(proc)  # whatever the check left running in its group (none when it cleaned up)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)  # the check and everything it started (engines, servers, Ray)
            returncode = proc.wait()
    seconds = round(time.monotonic() - t0, 1)
    tail = log_file.read_text(errors="replace")[-1500:]
    if timed_out:
        return CheckResult(check.name, FAILED, seconds, f"timed out after {check.timeout_s:.0f}s (killed); "
                           f"log {log_file}", {"log_tail": tail})
    if not result_file.exists():
        return CheckResult(check.name, FAILED, seconds, f"the check's process exited with status {returncode} "
                           f"without a result (crashed); log {log_file}", {"log_tail": tail})
    data = json.loads(result_file.read_text())
    if data["status"] == OK:
        return CheckResult(check.name, OK, seconds, "", data.get("detail") or {})
    return CheckResult(check.name, FAILED, seconds, data["error"], {"log": str(log_file),
                                                                     "traceback": data.get("traceback", "")[-3000:]})


LEGACY_DECOMPILE_DATA = "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"


def decompile_data(cfg: Mapping[str, Any]) -> str:
    """The evaluation batch's file: ``evaluate.decompile.data`` when it is local, else (the paper config names the
    reference's file by URL; compute nodes may be offline) the shipped legacy HumanEval-Decompile file."""
    data = str(cfg["evaluate"]["decompile"]["data"])
    return LEGACY_DECOMPILE_DATA if data.startswith(("http://", "https://")) else data


def plan_checks(cfg: Mapping[str, Any], *, decompile_data: str, out_dir: str | os.PathLike,
                logs_dir: str | os.PathLike) -> list[Check]:
    """The smoke's checks for this config (``smoke`` section: sizes and time limits). Its inputs are its own
    (toy task, tiny model) and the shipped evaluation file: nothing of the pipeline needs to run first."""
    sm = cfg["smoke"]
    out, logs = Path(out_dir).resolve(), Path(logs_dir).resolve()
    model, data = str(out / "tiny"), out / "toy"
    t = sm["timeouts_s"]
    mem = float(sm["gpu_memory_utilization"])
    return [
        Check("tiny_model", "codegrpo.smoke:check_tiny_model",
              {"out_dir": model, "data_dir": str(data), **sm["tiny"], "seed": int(cfg.get("seed", 0))},
              t["tiny_model"]),
        Check("import_verl_workers", "codegrpo.smoke:check_import", {"module": "verl.workers.fsdp_workers"},
              t["imports"]),
        Check("import_vllm", "codegrpo.smoke:check_import", {"module": "vllm"}, t["imports"]),
        Check("import_flash_attn", "codegrpo.smoke:check_import", {"module": "flash_attn"}, t["imports"]),
        Check("sandbox", "codegrpo.smoke:check_sandbox", {"section": dict(cfg.get("sandbox") or {})}, 60.0),
        Check("vllm_engine", "codegrpo.smoke:check_vllm_engine", {"model_dir": model, "gpu_memory_utilization": mem},
              t["vllm_engine"]),
        Check("embedding_server", "codegrpo.smoke:check_embedding_server",
              {"section": dict(cfg["embedding"]), "log_path": str(logs / "embedding_server.log")},
              t["embedding_server"]),
        Check("grpo_vllm", "codegrpo.smoke:check_grpo",
              {"cfg": {k: cfg[k] for k in GRPO_SECTIONS if k in cfg},
               "smoke": dict(sm), "train": str(data / "toy.train.parquet"), "val": str(data / "toy.val.parquet"),
               "model_dir": model, "run_dir": str(out / "grpo")}, t["grpo"]),
        Check("eval_vllm", "codegrpo.smoke:check_eval_batch",
              {"model_dir": model, "data": str(Path(decompile_data).resolve()), "out_path": str(out / "eval.json"),
               "batch_size": int(sm["eval_batch_size"]), "max_new_tokens": int(sm["max_new_tokens"]),
               "gpu_memory_utilization": mem}, t["eval"]),
    ]


def environment() -> dict:
    """Where the smoke ran: host, Python, SLURM job, GPUs (nvidia-smi), library versions."""
    info: dict[str, Any] = {"host": socket.gethostname(), "python": platform.python_version(),
                            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            # what the job got from the workflow (hub section): the cache and the offline switches
                            "hf_home": os.environ.get("HF_HOME"), "hf_hub_offline": os.environ.get("HF_HUB_OFFLINE"),
                            "hf_datasets_offline": os.environ.get("HF_DATASETS_OFFLINE")}
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        info["gpus"] = [x.strip() for x in proc.stdout.splitlines() if x.strip()] if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        info["gpus"] = []
    for mod in ("torch", "transformers", "verl", "vllm", "flash_attn", "ray"):
        try:
            info[mod] = importlib.import_module(mod).__version__
        except Exception:  # noqa: BLE001 - a missing package is reported as such
            info[mod] = None
    return info


def write_report(results: Sequence[CheckResult], md_path: str | os.PathLike, json_path: str | os.PathLike | None = None,
                 *, env: Mapping[str, Any] | None = None, total_s: float | None = None) -> dict:
    """``report.md`` (a table: check, ok/failed, seconds, error; then each check's details) and ``report.json``."""
    n_ok = sum(r.status == OK for r in results)
    summary = {"ok": n_ok, "failed": len(results) - n_ok, "total_s": total_s if total_s is not None else
               round(sum(r.seconds for r in results), 1)}
    lines = ["# Cluster smoke test", "",
             f"{n_ok} of {len(results)} checks ok, {summary['failed']} failed, {summary['total_s']} s in all.", ""]
    if env:
        lines += ["| environment | |", "|---|---|"]
        lines += [f"| {k} | {_cell(', '.join(v) if isinstance(v, list) else v)} |" for k, v in env.items()]
        lines.append("")
    lines += ["| check | status | seconds | error |", "|---|---|---:|---|"]
    lines += [f"| {r.name} | {r.status} | {r.seconds:.1f} | {_cell(r.error)} |" for r in results]
    lines.append("")
    for r in results:
        lines += [f"## {r.name}: {r.status}", ""]
        if r.error:
            lines += ["```", r.error, "```", ""]
        detail = {k: v for k, v in r.detail.items() if k != "traceback"}
        if detail:
            lines += ["```json", json.dumps(detail, indent=2, default=str)[:4000], "```", ""]
        if r.detail.get("traceback"):
            lines += ["<details><summary>traceback</summary>", "", "```", r.detail["traceback"], "```", "",
                      "</details>", ""]
    with atomic_open(md_path) as fh:
        fh.write("\n".join(lines))
    report = {"summary": summary, "environment": dict(env or {}), "checks": [asdict(r) for r in results]}
    if json_path:
        write_json(json_path, report)
    return report


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\n", " ").replace("|", "\\|")[:300]


def run_smoke(checks: Sequence[Check], out_dir: str | os.PathLike, md_path: str | os.PathLike,
              json_path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> dict:
    """Run every check (each whatever the others did), then write the report; returns the report dict."""
    t0 = time.monotonic()
    results = []
    for check in checks:
        log.info("smoke: %s ...", check.name)
        res = run_check(check, Path(out_dir) / "checks", env=env)
        log.info("smoke: %s %s in %.1fs %s", check.name, res.status, res.seconds, res.error)
        results.append(res)
    return write_report(results, md_path, json_path, env=environment(), total_s=round(time.monotonic() - t0, 1))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 4 and argv[0] == "check":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        return _child(*argv[1:])
    print("usage: python -m codegrpo.smoke check <module:function> <kwargs.json> <result.json>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

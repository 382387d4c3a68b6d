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
check <module:function> <kwargs.json> <result.json>`` is what runs in the child process. The checks themselves
are :mod:`codegrpo.smoke_checks` (re-exported here); this module plans, runs and reports them.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.io import atomic_open, write_json
from codegrpo.procgroup import kill_group, popen_group
from codegrpo.smoke_checks import (
    GRPO_SECTIONS,
    check_embedding_server,
    check_eval_batch,
    check_grpo,
    check_import,
    check_sandbox,
    check_tiny_model,
    check_vllm_engine,
    smoke_grpo_config,
)

log = logging.getLogger(__name__)

__all__ = [
    "Check",
    "CheckResult",
    "GRPO_SECTIONS",
    "check_embedding_server",
    "check_eval_batch",
    "check_grpo",
    "check_import",
    "check_sandbox",
    "check_tiny_model",
    "check_vllm_engine",
    "plan_checks",
    "run_check",
    "run_smoke",
    "smoke_grpo_config",
    "write_report",
]

OK, FAILED = "ok", "failed"


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
        proc = popen_group(
            [sys.executable, "-m", "codegrpo.smoke", "check", check.target, str(kwargs_file), str(result_file)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
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
        return CheckResult(
            check.name,
            FAILED,
            seconds,
            f"timed out after {check.timeout_s:.0f}s (killed); log {log_file}",
            {"log_tail": tail},
        )
    if not result_file.exists():
        return CheckResult(
            check.name,
            FAILED,
            seconds,
            f"the check's process exited with status {returncode} without a result (crashed); log {log_file}",
            {"log_tail": tail},
        )
    data = json.loads(result_file.read_text())
    if data["status"] == OK:
        return CheckResult(check.name, OK, seconds, "", data.get("detail") or {})
    return CheckResult(
        check.name,
        FAILED,
        seconds,
        data["error"],
        {"log": str(log_file), "traceback": data.get("traceback", "")[-3000:]},
    )


LEGACY_DECOMPILE_DATA = "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"


def decompile_data(cfg: Mapping[str, Any]) -> str:
    """The evaluation batch's file: ``evaluate.decompile.data`` when it is local, else (the paper config names the
    reference's file by URL; compute nodes may be offline) the shipped legacy HumanEval-Decompile file."""
    data = str(cfg["evaluate"]["decompile"]["data"])
    return LEGACY_DECOMPILE_DATA if data.startswith(("http://", "https://")) else data


def plan_checks(
    cfg: Mapping[str, Any], *, decompile_data: str, out_dir: str | os.PathLike, logs_dir: str | os.PathLike
) -> list[Check]:
    """The smoke's checks for this config (``smoke`` section: sizes and time limits). Its inputs are its own
    (toy task, tiny model) and the shipped evaluation file: nothing of the pipeline needs to run first."""
    sm = cfg["smoke"]
    out, logs = Path(out_dir).resolve(), Path(logs_dir).resolve()
    model, data = str(out / "tiny"), out / "toy"
    t = sm["timeouts_s"]
    mem = float(sm["gpu_memory_utilization"])
    return [
        Check(
            "tiny_model",
            "codegrpo.smoke_checks:check_tiny_model",
            {"out_dir": model, "data_dir": str(data), **sm["tiny"], "seed": int(cfg.get("seed", 0))},
            t["tiny_model"],
        ),
        Check(
            "import_verl_workers",
            "codegrpo.smoke_checks:check_import",
            {"module": "verl.workers.fsdp_workers"},
            t["imports"],
        ),
        Check("import_vllm", "codegrpo.smoke_checks:check_import", {"module": "vllm"}, t["imports"]),
        Check("import_flash_attn", "codegrpo.smoke_checks:check_import", {"module": "flash_attn"}, t["imports"]),
        Check("sandbox", "codegrpo.smoke_checks:check_sandbox", {"section": dict(cfg.get("sandbox") or {})}, 60.0),
        Check(
            "vllm_engine",
            "codegrpo.smoke_checks:check_vllm_engine",
            {"model_dir": model, "gpu_memory_utilization": mem},
            t["vllm_engine"],
        ),
        Check(
            "embedding_server",
            "codegrpo.smoke_checks:check_embedding_server",
            {"section": dict(cfg["embedding"]), "log_path": str(logs / "embedding_server.log")},
            t["embedding_server"],
        ),
        Check(
            "grpo_vllm",
            "codegrpo.smoke_checks:check_grpo",
            {
                "cfg": {k: cfg[k] for k in GRPO_SECTIONS if k in cfg},
                "smoke": dict(sm),
                "train": str(data / "toy.train.parquet"),
                "val": str(data / "toy.val.parquet"),
                "model_dir": model,
                "run_dir": str(out / "grpo"),
            },
            t["grpo"],
        ),
        Check(
            "eval_vllm",
            "codegrpo.smoke_checks:check_eval_batch",
            {
                "model_dir": model,
                "data": str(Path(decompile_data).resolve()),
                "out_path": str(out / "eval.json"),
                "batch_size": int(sm["eval_batch_size"]),
                "max_new_tokens": int(sm["max_new_tokens"]),
                "gpu_memory_utilization": mem,
            },
            t["eval"],
        ),
    ]


def environment() -> dict:
    """Where the smoke ran: host, Python, SLURM job, GPUs (nvidia-smi), library versions."""
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        # what the job got from the workflow (hub section): the cache and the offline switches
        "hf_home": os.environ.get("HF_HOME"),
        "hf_hub_offline": os.environ.get("HF_HUB_OFFLINE"),
        "hf_datasets_offline": os.environ.get("HF_DATASETS_OFFLINE"),
    }
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        info["gpus"] = [x.strip() for x in proc.stdout.splitlines() if x.strip()] if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        info["gpus"] = []
    for mod in ("torch", "transformers", "verl", "vllm", "flash_attn", "ray"):
        try:
            info[mod] = importlib.import_module(mod).__version__
        except Exception:  # noqa: BLE001 - a missing package is reported as such
            info[mod] = None
    return info


def write_report(
    results: Sequence[CheckResult],
    md_path: str | os.PathLike,
    json_path: str | os.PathLike | None = None,
    *,
    env: Mapping[str, Any] | None = None,
    total_s: float | None = None,
) -> dict:
    """``report.md`` (a table: check, ok/failed, seconds, error; then each check's details) and ``report.json``."""
    n_ok = sum(r.status == OK for r in results)
    summary = {
        "ok": n_ok,
        "failed": len(results) - n_ok,
        "total_s": total_s if total_s is not None else round(sum(r.seconds for r in results), 1),
    }
    lines = [
        "# Cluster smoke test",
        "",
        f"{n_ok} of {len(results)} checks ok, {summary['failed']} failed, {summary['total_s']} s in all.",
        "",
    ]
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
            lines += [
                "<details><summary>traceback</summary>",
                "",
                "```",
                r.detail["traceback"],
                "```",
                "",
                "</details>",
                "",
            ]
    with atomic_open(md_path) as fh:
        fh.write("\n".join(lines))
    report = {"summary": summary, "environment": dict(env or {}), "checks": [asdict(r) for r in results]}
    if json_path:
        write_json(json_path, report)
    return report


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\n", " ").replace("|", "\\|")[:300]


def run_smoke(
    checks: Sequence[Check],
    out_dir: str | os.PathLike,
    md_path: str | os.PathLike,
    json_path: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> dict:
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

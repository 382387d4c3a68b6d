"""Training stages end to end: import or train, export to Hugging Face, mark complete.

One function per kind of stage, called by the workflow scripts (and by tests with a plain config dict):

* :func:`run_sft` trains ``sft_<which>`` with verl's SFT trainer (or imports a checkpoint);
* :func:`run_grpo` trains ``skeleton_rl`` / ``skin_rl`` with GRPO (or imports a checkpoint).

Run folder ``results/runs/<run>/``: ``config.json`` (what was asked), ``checkpoints/`` (verl's), ``train.log``
(the trainer's output, appended across attempts), ``metrics.jsonl`` (one line per step), ``hf/`` (the final
model in Hugging Face layout) and ``done.json``, written last and only when training finished. A rerun after a
kill resumes from the newest checkpoint (verl ``trainer.resume_mode=auto`` for GRPO; newest weights for SFT).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Mapping, Sequence

from codegrpo import preflight
from codegrpo.io import write_json
from codegrpo.models import export_hf, import_checkpoint
from codegrpo.verl import checkpoints
from codegrpo.verl.launch import grpo_launch, sft_launch

log = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """The trainer exited with an error or left no final checkpoint (the message points at train.log)."""


class TrainingInputError(ValueError):
    """A training input (parquet file, initial model) is missing or malformed; the message names file, row, field."""


def _files_list(files) -> list[Path]:
    return [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]


def check_parquet(files, kind: str) -> int:
    """Check SFT (``prompt``/``response`` strings) or verl RL parquet rows before a launch; return the row count.

    verl would fail minutes later, deep in a worker, on the same problems.
    """
    import pandas as pd

    total = 0
    for path in _files_list(files):
        if not path.is_file():
            raise TrainingInputError(f"{path}: {kind} parquet file does not exist")
        df = pd.read_parquet(path)
        need = ["prompt", "response"] if kind == "sft" else ["data_source", "prompt", "reward_model"]
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise TrainingInputError(f"{path}: missing column(s) {missing} for {kind} training; "
                                     f"columns are {list(df.columns)}")
        if df.empty:
            raise TrainingInputError(f"{path}: no rows")
        for i, row in enumerate(df.itertuples(index=False)):
            where = f"{path}: row {i}"
            if kind == "sft":
                for col in need:
                    if not isinstance(getattr(row, col), str) or not getattr(row, col):
                        raise TrainingInputError(f"{where}: field {col!r} must be a non-empty string")
                continue
            msgs = row.prompt
            if msgs is None or len(msgs) == 0 or any(
                    not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m for m in msgs):
                raise TrainingInputError(f"{where}: field 'prompt' must be a list of {{role, content}} messages")
            rm = row.reward_model
            if not isinstance(rm, dict) or "ground_truth" not in rm:
                raise TrainingInputError(f"{where}: field 'reward_model' must be a dict with 'ground_truth'")
            if not isinstance(row.data_source, str) or not row.data_source:
                raise TrainingInputError(f"{where}: field 'data_source' must be a non-empty string")
        total += len(df)
    return total


def check_model(path: str) -> None:
    """A local initial model must be a Hugging Face folder; other strings are hub ids resolved by the trainer."""
    from codegrpo.models import is_hf_dir

    p = Path(os.path.expanduser(path))
    if (p.exists() or path.startswith((".", "/", "~"))) and not is_hf_dir(p):
        raise TrainingInputError(f"{p}: initial model is not a Hugging Face folder (config.json + weights)")


def _start(run_dir: Path, record: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    done = run_dir / "done.json"
    if done.exists():
        done.unlink()  # being (re)built: not complete until this attempt finishes
    write_json(run_dir / "config.json", record)


def _finish(run_dir: Path, record: dict, t0: float) -> dict:
    metrics = run_dir / "metrics.jsonl"
    steps = 0
    if metrics.is_file():
        with open(metrics, encoding="utf-8") as fh:
            steps = sum(1 for line in fh if line.strip())
    out = {**record, "hf": str(run_dir / "hf"), "metrics_lines": steps, "seconds": round(time.time() - t0, 1),
           "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_json(run_dir / "done.json", out)
    return out


def _import(run_dir: Path, src: str, record: dict, t0: float) -> dict:
    log.info("%s: importing %s instead of training", record["run"], src)
    import_checkpoint(src, run_dir / "hf")
    return _finish(run_dir, {**record, "imported_from": src}, t0)


def _run_launch(launch, run_dir: Path) -> None:
    train_log = run_dir / "train.log"
    log.info("%s: %s", launch.run, launch.command())
    rc = launch.run_process(train_log)
    if rc != 0:
        raise TrainingError(f"{launch.run}: trainer exited with status {rc}; see {train_log}")


def run_sft(cfg: Mapping, which: str, *, train_files: Sequence[str] | str, val_files: Sequence[str] | str,
            init_model: str, run_dir: str | os.PathLike) -> dict:
    """Train (or import) ``sft_<which>``; returns the done.json record."""
    t0 = time.time()
    run_dir = Path(run_dir)
    run = f"sft_{which}"
    src = (cfg["sft"].get("import") or {}).get(which)
    record = {"run": run, "kind": "sft", "device": cfg["device"], "init_model": init_model,
              "section": dict(cfg["sft"])}
    _start(run_dir, record)
    if src:
        return _import(run_dir, src, record, t0)
    check_model(init_model)
    rows = check_parquet(train_files, "sft")
    log.info("%s: %d training rows, %d validation rows", run, rows, check_parquet(val_files, "sft"))
    preflight.stage_checks(cfg, "sft", rows=rows, model_dir=init_model, files=str(train_files))
    launch = sft_launch(cfg, which, train_files=train_files, val_files=val_files, model_path=init_model,
                        run_dir=run_dir)
    _run_launch(launch, run_dir)
    from codegrpo.verl.sft_main import latest_sft_checkpoint

    found = latest_sft_checkpoint(run_dir / "checkpoints")
    if not found:
        raise TrainingError(f"{run}: training ended without a checkpoint in {run_dir / 'checkpoints'}")
    step, path = found
    export_hf(path, run_dir / "hf", tokenizer_from=init_model)
    return _finish(run_dir, {**record, "final_step": step, "checkpoint": str(path)}, t0)


def run_grpo(cfg: Mapping, stage: str, *, train_files: Sequence[str] | str, val_files: Sequence[str] | str,
             init_model: str, run_dir: str | os.PathLike, extra_overrides: Sequence[str] = (),
             env: Mapping[str, str] | None = None, reward_path: str | None = None) -> dict:
    """Train (or import) an RL stage with GRPO; returns the done.json record."""
    t0 = time.time()
    run_dir = Path(run_dir)
    section = cfg[stage]
    record = {"run": stage, "kind": "grpo", "device": cfg["device"], "init_model": init_model,
              "section": dict(section)}
    _start(run_dir, record)
    if section.get("import"):
        return _import(run_dir, section["import"], record, t0)
    check_model(init_model)
    rows = check_parquet(train_files, "rl")
    log.info("%s: %d training prompts, %d validation prompts", stage, rows, check_parquet(val_files, "rl"))
    if stage in preflight.training_sections(cfg):
        preflight.stage_checks(cfg, stage, rows=rows, model_dir=init_model, files=str(train_files))
    launch = grpo_launch(cfg, stage, train_files=train_files, val_files=val_files, model_path=init_model,
                         run_dir=run_dir, extra_overrides=extra_overrides, reward_path=reward_path)
    launch.env.update(env or {})
    _run_launch(launch, run_dir)
    ckpt_dir = run_dir / "checkpoints"
    latest = checkpoints.latest_actor(ckpt_dir)
    if latest is None:
        raise TrainingError(f"{stage}: training ended without a checkpoint in {ckpt_dir}")
    step, actor = latest
    export_hf(actor, run_dir / "hf", tokenizer_from=init_model)
    return _finish(run_dir, {**record, "final_step": step, "checkpoint": str(actor)}, t0)


def run_rl_stage(cfg: Mapping, stage: str, *, train_files: Sequence[str] | str, val_files: Sequence[str] | str,
                 init_model: str, run_dir: str | os.PathLike, uses_embedding: bool = False) -> dict:
    """:func:`run_grpo` inside the stage's job context.

    * the ``compile_reward`` settings, and for a stage whose reward embeds text (``uses_embedding``: skin_rl)
      the ``embedding`` settings, reach the reward as ``CODEGRPO_*`` variables;
    * with ``embedding.serve: true`` such a stage starts the embedding server
      (:func:`codegrpo.services.embedding_service`) on 127.0.0.1 for the duration of training and stops it after;
    * in a multi-node SLURM job (GPU mode) a Ray cluster spans the allocation (:mod:`codegrpo.cluster`) and
      the driver joins it through ``RAY_ADDRESS``.
    """
    section = cfg[stage]
    run_dir = Path(run_dir)
    env: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if not section.get("import"):
            if cfg.get("compile_reward"):
                from codegrpo.rewards.compile import env_from_config as compile_env

                env.update(compile_env(dict(cfg["compile_reward"])))
            embedding = dict(cfg.get("embedding") or {})
            if uses_embedding and embedding:
                from codegrpo.rewards.embedding import env_from_config as embedding_env

                env.update(embedding_env(embedding))
                if embedding.get("serve"):
                    from codegrpo.services import embedding_service

                    run_dir.mkdir(parents=True, exist_ok=True)
                    svc = stack.enter_context(
                        embedding_service(embedding, log_path=run_dir / "embedding_server.log"))
                    env.update(svc.env)
                    log.info("%s: embedding server ready (%s)", stage, env.get("CODEGRPO_EMBEDDING_API_BASE"))
            if cfg["device"] != "cpu" and section.get("nnodes", 1) > 1:
                from codegrpo.cluster import multinode_ray

                cl = cfg.get("cluster", {})
                kw = {name: cl[key] for key, name in (("ray_port", "port"), ("ray_start_timeout_s", "timeout_s"))
                      if key in cl}
                rc = stack.enter_context(multinode_ray(**kw))
                if rc is not None and os.environ.get("RAY_ADDRESS"):
                    env["RAY_ADDRESS"] = os.environ["RAY_ADDRESS"]
        return run_grpo(cfg, stage, train_files=train_files, val_files=val_files, init_model=init_model,
                        run_dir=run_dir, env=env)

"""Training stages end to end: import or train, export to Hugging Face, mark complete.

One function per kind of stage, called by the workflow scripts (and by tests with a plain config dict):

* :func:`run_sft` trains ``sft_<which>`` with verl's SFT trainer (or imports a checkpoint);
* :func:`run_grpo` trains ``skeleton_rl`` / ``skin_rl`` with GRPO (or imports a checkpoint); a GRPO run's settings,
  run folder, services and launch are :mod:`codegrpo.verl.grpo_settings`'s.

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

from codegrpo import preflight, runsettings
from codegrpo.cluster.rehearsal import rehearsal_ray_cluster, write_ray_rehearsal
from codegrpo.contracts import RL_STAGES
from codegrpo.data.training_inputs import TrainingInputError, check_model, check_parquet
from codegrpo.io import write_json
from codegrpo.models import import_checkpoint
from codegrpo.runlock import locked_run_dir
from codegrpo.verl import checkpoints
from codegrpo.verl.checkpoints import export_hf
from codegrpo.verl.grpo_settings import (
    FINISHED_FILE,
    GrpoHook,
    prepare_run_dir,
    run_services,
    run_settings,
    settings_launch,
)
from codegrpo.verl.launch import sft_launch

log = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """The trainer exited with an error or left no final checkpoint (the message points at train.log)."""


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
    out = {
        **record,
        "hf": str(run_dir / "hf"),
        "metrics_lines": steps,
        "seconds": round(time.time() - t0, 1),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(run_dir / "done.json", out)
    return out


def _import(run_dir: Path, src: str, record: dict, t0: float) -> dict:
    log.info("%s: importing %s instead of training", record["run"], src)
    import_checkpoint(src, run_dir / "hf")
    return _finish(run_dir, {**record, "imported_from": src}, t0)


def epochs_override(cfg: Mapping, section: Mapping, rows: int, *, kind: str) -> str:
    """``trainer.total_epochs=<N>`` with N enough epochs of ``rows`` training rows for the section's
    ``total_training_steps`` (:func:`codegrpo.budget.epochs_for_steps`; verl's loop otherwise ends with its
    epochs before the step budget, with no final save or validation). Appended last, so it wins."""
    from codegrpo import budget

    world = 1 if cfg["device"] == "cpu" else int(section.get("nnodes", 1)) * int(section.get("n_gpus_per_node", 1))
    plan = budget.step_plan(section, rows, kind=kind, world=world)
    if not plan["batches_per_epoch"]:
        raise TrainingInputError(
            f"{rows} training rows fill no batch of train_batch_size = "
            f"{section['train_batch_size']}" + (f" over {world} GPUs" if kind == "sft" else "")
        )
    return f"trainer.total_epochs={plan['epochs']}"


def _run_launch(launch, run_dir: Path) -> None:
    train_log = run_dir / "train.log"
    log.info("%s: %s", launch.run, launch.command())
    rc = launch.run_process(train_log)
    if rc != 0:
        raise TrainingError(f"{launch.run}: trainer exited with status {rc}; see {train_log}")


def chat_template_choice(cfg: Mapping, stage: str, init_model: str) -> str | None:
    """The resolved ``model.chat_template`` of an SK²Decompile stage (sft, skeleton_rl, skin_rl) starting from
    ``init_model``; None for other runs (DHRCL keeps its tokenizer's template). An error names the key."""
    from codegrpo.verl import prompts

    if stage not in prompts.SK2D_STAGES:
        return None
    return prompts.resolve(
        (cfg.get("model") or {}).get("chat_template"), prompts.model_has_template(init_model), where=str(init_model)
    )


@locked_run_dir
def run_sft(
    cfg: Mapping,
    which: str,
    *,
    train_files: Sequence[str] | str,
    val_files: Sequence[str] | str,
    init_model: str,
    run_dir: str | os.PathLike,
) -> dict:
    """Train (or import) ``sft_<which>``; returns the done.json record."""
    t0 = time.time()
    run_dir = Path(run_dir)
    run = f"sft_{which}"
    src = (cfg["sft"].get("import") or {}).get(which)
    record = {"run": run, "kind": "sft", "device": cfg["device"], "init_model": init_model, "section": dict(cfg["sft"])}
    _start(run_dir, record)
    if src:
        return _import(run_dir, src, record, t0)
    check_model(init_model)
    template = chat_template_choice(cfg, "sft", init_model)
    write_json(run_dir / "config.json", {**record, "chat_template": template})
    rows = check_parquet(train_files, "sft")
    log.info("%s: %d training rows, %d validation rows", run, rows, check_parquet(val_files, "sft"))
    preflight.stage_checks(cfg, "sft", rows=rows, model_dir=init_model, files=str(train_files))
    launch = sft_launch(
        cfg,
        which,
        train_files=train_files,
        val_files=val_files,
        model_path=init_model,
        run_dir=run_dir,
        chat_template=template,
    )
    launch.overrides.append(epochs_override(cfg, cfg["sft"], rows, kind="sft"))
    _run_launch(launch, run_dir)
    from codegrpo.verl.sft_main import latest_sft_checkpoint

    found = latest_sft_checkpoint(run_dir / "checkpoints")
    if not found:
        raise TrainingError(f"{run}: training ended without a checkpoint in {run_dir / 'checkpoints'}")
    step, path = found
    export_hf(path, run_dir / "hf", tokenizer_from=init_model)
    return _finish(run_dir, {**record, "final_step": step, "checkpoint": str(path), "chat_template": template}, t0)


@locked_run_dir
def run_grpo(
    cfg: Mapping,
    section: Mapping,
    run: str,
    *,
    train_files: Sequence[str] | str,
    val_files: Sequence[str] | str,
    init_model: str,
    run_dir: str | os.PathLike,
    extra_overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    reward_path: str | None = None,
    hook: GrpoHook | None = None,
) -> dict:
    """Train (or import) GRPO run ``run`` from the RL ``section`` of the config; returns the done.json record.

    The one GRPO lifecycle (skeleton_rl, skin_rl and every dhrcl-<variant>): resolve the run's settings once
    into ``settings.json`` (:func:`prepare_run_dir` decides resume or fresh start), start the run's services
    (:func:`run_services`: their endpoints go into settings.json), launch verl with ``$CODEGRPO_RUN_SETTINGS``
    naming that file (the only channel of settings into verl's workers), export the newest actor checkpoint,
    write ``finished.json`` and ``done.json``.
    """
    t0 = time.time()
    hook = hook or GrpoHook()
    run_dir = Path(run_dir).resolve()
    record = {"run": run, "kind": "grpo", "device": cfg["device"], "init_model": init_model, "section": dict(section)}
    template = None if section.get("import") else chat_template_choice(cfg, run, init_model)
    settings = run_settings(
        cfg,
        section,
        run,
        train_files=train_files,
        val_files=val_files,
        init_model=init_model,
        run_dir=run_dir,
        extra_overrides=extra_overrides,
        hook=hook,
        chat_template=template,
    )
    mode = prepare_run_dir(run_dir, settings)
    done = run_dir / "done.json"
    if done.exists():
        done.unlink()  # being (re)built: not complete until this attempt finishes
    write_json(run_dir / "config.json", {**record, "start": mode})
    if section.get("import"):
        out = _import(run_dir, section["import"], record, t0)
        write_json(run_dir / FINISHED_FILE, {"finished_at": out["finished_at"]})
        return out
    check_model(init_model)
    rows = check_parquet(train_files, "rl")
    log.info("%s: %d training prompts, %d validation prompts", run, rows, check_parquet(val_files, "rl"))
    # the preflight of the config section behind the run (skeleton_rl, skin_rl, dhrcl-<variant> -> dhrcl);
    # other runs (the learning checks) carry their own section
    stage = "dhrcl" if run.startswith("dhrcl-") else run
    if stage in preflight.training_sections(cfg):
        preflight.stage_checks(cfg, stage, rows=rows, model_dir=init_model, files=str(train_files))
    launch = settings_launch(cfg, settings, run_dir, env=env, reward_path=reward_path, hook=hook)
    launch.overrides.append(epochs_override(cfg, section, rows, kind="rl"))
    if mode == "resume" and section.get("max_checkpoints_to_keep"):
        removed = checkpoints.prune_for_resume(run_dir / "checkpoints")
        if removed:
            log.info("%s: removed the previous attempt's checkpoints %s (max_checkpoints_to_keep)", run, removed)
    with run_services(settings, run_dir):
        _run_launch(launch, run_dir)
    ckpt_dir = run_dir / "checkpoints"
    latest = checkpoints.latest_actor(ckpt_dir)
    if latest is None:
        raise TrainingError(f"{run}: training ended without a checkpoint in {ckpt_dir}")
    step, actor = latest
    export_hf(actor, run_dir / "hf", tokenizer_from=init_model)
    extra = hook.finish(run_dir)
    write_json(
        run_dir / FINISHED_FILE, {"final_step": step, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    )
    return _finish(run_dir, {**record, **extra, "final_step": step, "checkpoint": str(actor), "start": mode}, t0)


def structure_reward_overrides(stage: str, section: Mapping) -> list[str]:
    """The reward kwargs that score skeleton_rl's data source with the configured ``structure_reward``."""
    from codegrpo.contracts import LLM4DECOMPILE_EXE, SK2D_STRUCTURE, SK2D_STRUCTURE_SIM
    from codegrpo.verl.launch import fmt

    choice = section.get("structure_reward") or runsettings.schema_defaults(stage)["structure_reward"]
    if choice == "exe_type":
        return []
    if choice != "sim_exe":
        raise ValueError(f"{stage}.structure_reward must be exe_type or sim_exe, got {choice!r}")
    if stage != "skeleton_rl":
        raise ValueError(f"{stage}.structure_reward: sim_exe applies to skeleton_rl only")
    routes = {SK2D_STRUCTURE: SK2D_STRUCTURE_SIM, LLM4DECOMPILE_EXE: SK2D_STRUCTURE_SIM}
    return [f"+custom_reward_function.reward_kwargs.data_source_map={fmt(routes)}"]


def run_rl_stage(cfg: Mapping, stage: str, **inputs) -> dict:
    """:func:`run_grpo` of RL stage ``stage`` (skeleton_rl | skin_rl) inside the stage's job context (``inputs``:
    its ``train_files``, ``val_files``, ``init_model`` and ``run_dir``).

    * ``structure_reward: sim_exe`` scores skeleton_rl's data source with ``sim_exe`` instead of ``exe_type``;
    * the ``compile_reward``, ``embedding`` and ``sandbox`` settings reach the reward through the run's
      settings.json (:func:`run_settings`);
    * with ``embedding.serve: true`` a stage whose reward embeds text (skin_rl) starts the embedding server
      (:func:`codegrpo.services.embedding_service`) on 127.0.0.1 for the duration of training and stops it after
      (:func:`run_services`);
    * in a multi-node SLURM job (GPU mode) a Ray cluster spans the allocation (:mod:`codegrpo.cluster`) and
      the driver joins it through ``RAY_ADDRESS``.
    """
    if stage not in RL_STAGES:
        raise ValueError(f"unknown RL stage {stage!r}; expected one of {RL_STAGES}")
    section = dict(cfg[stage])
    extra_overrides = structure_reward_overrides(stage, section)
    run_dir = Path(inputs["run_dir"])
    env: dict[str, str] = {}
    from codegrpo.verl.cpu import node_resources
    from codegrpo.verl.driver import WORKERS_FILE

    with contextlib.ExitStack() as stack:
        rehearsal = stack.enter_context(rehearsal_ray_cluster(cfg, section, node_resources))
        if rehearsal is not None:
            from codegrpo.verl.launch import cpu_multinode_overrides

            env.update(rehearsal["env"])
            extra_overrides += cpu_multinode_overrides(rehearsal["ray_nodes"], rehearsal["workers_per_node"])
        if not section.get("import"):
            if cfg["device"] != "cpu" and section.get("nnodes", 1) > 1:
                from codegrpo.cluster import multinode_ray

                cl = cfg.get("cluster", {})
                kw = {
                    name: cl[key]
                    for key, name in (
                        ("ray_port", "port"),
                        ("ray_start_timeout_s", "timeout_s"),
                        ("ray_temp_dir", "temp_base"),
                    )
                    if key in cl
                }
                rc = stack.enter_context(multinode_ray(**kw))
                if rc is not None and os.environ.get("RAY_ADDRESS"):
                    env["RAY_ADDRESS"] = os.environ["RAY_ADDRESS"]
        done = run_grpo(cfg, section, stage, **inputs, env=env, extra_overrides=extra_overrides)
    if rehearsal is not None:
        write_ray_rehearsal(run_dir, rehearsal, WORKERS_FILE)
    return done

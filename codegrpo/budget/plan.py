"""The plan's jobs: one entry per training job (rows, steps, checkpoints, memory, GPU-hours) and per GPU
evaluation job, the whole budget and what cannot run as planned."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codegrpo.budget.memory import eval_memory, rl_memory, sft_memory
from codegrpo.budget.models import (
    GB,
    MEMORY,
    THROUGHPUT,
    ModelSpec,
    gpu_memory_gb,
    gpu_peak_tflops,
    model_spec,
    reward_model_memory,
    server_memory_fraction,
)
from codegrpo.budget.steps import saves, step_plan
from codegrpo.contracts import RL_STAGES


def _parquet_rows(paths: list[Path]) -> int | None:
    if not paths or not all(p.is_file() for p in paths):
        return None
    try:
        import pyarrow.parquet as pq
    except ImportError:  # an environment without pyarrow: the expected rows stand in
        return None

    return sum(pq.read_metadata(p).num_rows for p in paths)


TRAIN_FILES = {
    "sft_skeleton": ("sft", "skeleton.train.parquet"),
    "sft_skin": ("sft", "skin.train.parquet"),
    "skeleton_rl": ("rl", "skeleton.train.parquet"),
    "skin_rl": ("rl", "skin.train.parquet"),
    "dhrcl": ("kodcode", "train.parquet"),
}


def plan_rows(cfg: Mapping, key: str, *, use_files: bool = True) -> tuple[int | None, str]:
    """Training rows of a job (key: sft_skeleton, sft_skin, skeleton_rl, skin_rl, dhrcl) and their source: the
    built Parquet file's row count (unless not ``use_files``), else ``budget.expected_rows``."""
    folder, name = TRAIN_FILES[key]
    path = Path(cfg.get("results_dir", "results")) / "data" / folder / name
    rows = _parquet_rows([path]) if use_files else None
    if rows is not None:
        return rows, str(path)
    expected = ((cfg.get("budget") or {}).get("expected_rows") or {}).get(key)
    if expected is not None:
        return int(expected), f"budget.expected_rows.{key}"
    return None, f"unknown ({path} not built; set budget.expected_rows.{key})"


def _world(cfg: Mapping, s: Mapping) -> int:
    if cfg["device"] == "cpu":
        return 1
    return int(s.get("nnodes", 1)) * int(s.get("n_gpus_per_node", 1))


def _rl_flops(P: float, s: Mapping) -> tuple[float, float]:
    """(rollout FLOPs, training + log-prob FLOPs) of one RL step (full-length sequences)."""
    seqs = int(s["train_batch_size"]) * int(s.get("n", 1))
    tokens = seqs * (int(s["max_prompt_length"]) + int(s["max_response_length"]))
    rollout = 2 * P * tokens
    train = (2 * 2 + 6 * int(s.get("ppo_epochs", 1))) * P * tokens
    return rollout, train


def _job(
    cfg: Mapping,
    run: str,
    stage: str,
    path: str,
    s: Mapping,
    model: str,
    rows_key: str,
    kind: str,
    gpu_gb: float | None,
    use_files: bool = True,
) -> dict:
    rows, source = plan_rows(cfg, rows_key, use_files=use_files)
    world = _world(cfg, s)
    steps = step_plan(s, rows, kind=kind, world=world)
    spec = model_spec(cfg, model)
    if model == "base":
        model = cfg["model"]["base"]
    job: dict[str, Any] = {
        "run": run,
        "stage": stage,
        "section": path,
        "kind": kind,
        "model": model,
        "params": spec.params if spec else None,
        "world": world,
        "rows_source": source,
        **steps,
    }
    total = steps["total_steps"] or 0
    save_freq = int(s["save_freq"])
    n_saves = saves(total, save_freq)
    if kind == "rl":
        keep = s.get("max_checkpoints_to_keep")
        kept = min(n_saves, int(keep)) if keep else n_saves
        per = MEMORY.rl_checkpoint_bytes_per_param
    else:
        keep, kept, per = None, n_saves, MEMORY.sft_checkpoint_bytes_per_param
    job.update(saves=n_saves, max_checkpoints_to_keep=keep, checkpoints_kept=kept)
    if spec:
        ckpt = per * spec.params / GB
        job.update(checkpoint_gb=ckpt, disk_gb=kept * ckpt + MEMORY.export_bytes_per_param * spec.params / GB)
    if stage == "dhrcl" and steps["total_training_steps"]:
        job["curriculum"] = curriculum_plan(cfg, run)
    if cfg["device"] == "cpu" or spec is None:
        job["memory"] = None
        job["gpu_hours"] = 0.0 if cfg["device"] == "cpu" else None
        return job
    if kind == "rl":
        extra = 0.0
        emb = cfg.get("embedding") or {}
        if stage == "skin_rl" and emb.get("serve") and gpu_gb:
            extra = server_memory_fraction(emb) * gpu_gb  # the server shares a training GPU
        rm = _reward_model_section(cfg, run) if stage == "dhrcl" else None
        if rm is not None:  # the reward-model server shares a training GPU
            job["reward_model"] = reward_model_memory(cfg, rm)
            extra += job["reward_model"]["peak_gb"] or 0.0
        job["memory"] = rl_memory(spec, s, world, gpu_gb, extra_gb=extra)
        roll, train = _rl_flops(spec.params, s)
        peak = gpu_peak_tflops(cfg) * 1e12
        secs = total * (roll / (THROUGHPUT.rollout_mfu * peak * world) + train / (THROUGHPUT.train_mfu * peak * world))
    else:
        job["memory"] = sft_memory(spec, s, world, gpu_gb)
        tokens = int(s["train_batch_size"]) * int(s["max_length"]) * total
        secs = 6 * spec.params * tokens / (THROUGHPUT.train_mfu * gpu_peak_tflops(cfg) * 1e12 * world)
    job["gpu_hours"] = secs * world / 3600.0
    job["wall_hours"] = secs / 3600.0
    return job


def _reward_model_section(cfg: Mapping, run: str) -> dict | None:
    """The resolved ``dhrcl.reward_model`` of DHRCL run ``run`` when its variant scores with a reward model."""
    from codegrpo.runsettings import schema_defaults
    from codegrpo.verl.dhrcl import plan_runs, resolve_variant

    dcfg = cfg["dhrcl"]
    if resolve_variant(dcfg, plan_runs(cfg)[run]["variant"])["reward"] != "reward_model":
        return None
    return {**schema_defaults("dhrcl", "reward_model"), **dict(dcfg.get("reward_model") or {})}


def curriculum_plan(cfg: Mapping, run: str) -> dict:
    """The step at which each curriculum cap (or fixed schedule) fires for DHRCL run ``run``."""
    from codegrpo.verl.dhrcl import curriculum_config, resolve_variant

    from codegrpo.verl.dhrcl import plan_runs

    variant = plan_runs(cfg)[run]["variant"]
    dcfg = cfg["dhrcl"]
    total = int(dcfg["training"]["total_training_steps"])
    vdef = resolve_variant(dcfg, variant)
    if vdef["curriculum"] == "none":
        return {"kind": "none"}
    c = curriculum_config(dcfg, vdef, total)
    if c.forced_schedule:
        lens, kind = list(c.forced_schedule), "fixed"
    else:
        lens, kind = [c.max_steps_for(1), c.max_steps_for(2)], "trend (caps)"
    return {
        "kind": kind,
        "stage_lengths": lens,
        "stage2_by_step": lens[0],
        "stage3_by_step": lens[0] + lens[1],
        "total_steps": total,
    }


def plan_jobs(cfg: Mapping, *, use_files: bool = True) -> list[dict]:
    """One entry per training job of the plan."""
    gpu_gb, _ = gpu_memory_gb(cfg)
    jobs = []
    sft = cfg.get("sft") or {}
    imports = sft.get("import") or {}
    for which in ("skeleton", "skin"):
        if sft and not imports.get(which):
            jobs.append(_job(cfg, f"sft_{which}", "sft", "sft", sft, "base", f"sft_{which}", "sft", gpu_gb, use_files))
    for stage in RL_STAGES:
        s = cfg.get(stage)
        if s and not s.get("import"):
            jobs.append(_job(cfg, stage, stage, stage, s, "base", stage, "rl", gpu_gb, use_files))
    d = cfg.get("dhrcl") or {}
    if d.get("training") and not d["training"].get("import"):
        from codegrpo.verl.dhrcl import model_cfg, plan_runs

        for run, r in plan_runs(cfg).items():
            mcfg = model_cfg(cfg, r["model"], r["variant"])
            job = _job(
                mcfg,
                run,
                "dhrcl",
                "dhrcl.training",
                mcfg["dhrcl"]["training"],
                r["init"],
                "dhrcl",
                "rl",
                gpu_gb,
                use_files,
            )
            if r["model"] is not None:  # the keys this size overrides are changed in its own entry
                entry = next(m for m in d["models"] if m["name"] == r["model"])
                job["overrides"] = {
                    "path": f"dhrcl.models[{r['model']}].training",
                    "keys": sorted((entry.get("training") or {}).keys()),
                }
            jobs.append(job)
    return jobs


# Problems per code-generation benchmark (the published releases the config names); kodcode_heldout comes from
# the config (budget.expected_rows.dhrcl x data.kodcode.heldout_fraction). LiveCodeBench v6 counts every problem
# of the release (the configured date window takes fewer): an upper bound.
EVAL_PROBLEMS = {
    "humaneval": 164,
    "humaneval_plus": 164,
    "mbpp_plus": 378,
    "bigcodebench_full": 1140,
    "bigcodebench_hard": 148,
    "livecodebench": 1055,
}
DECOMPILE_TASKS = 164 * 4  # per benchmark: 164 functions x 4 optimisation levels (HumanEval- and MBPP-Decompile)


def eval_gpu_hours(spec: ModelSpec, generated_tokens: float, prompt_tokens: float, cfg: Mapping) -> float:
    """GPU-hours of generating ``generated_tokens`` after ``prompt_tokens`` of prompts: 2 Ψ FLOPs per token at
    the rollout's utilisation (decoding is memory-bound; prefill counted at the same rate, an upper bound)."""
    flops = 2.0 * spec.params * (generated_tokens + prompt_tokens)
    return flops / (THROUGHPUT.rollout_mfu * gpu_peak_tflops(cfg) * 1e12) / 3600.0


def codegen_tokens(cfg: Mapping, gen: Mapping) -> tuple[float, float]:
    """(generated, prompt) token upper bounds of one run's code-generation job: every benchmark's problems x
    samples, each response at max_new_tokens, each prompt at evaluate.max_prompt_tokens."""
    n = int(gen.get("n_samples") or 1)
    heldout = ((cfg.get("budget") or {}).get("expected_rows") or {}).get("dhrcl") or 0
    frac = float(((cfg.get("data") or {}).get("kodcode") or {}).get("heldout_fraction") or 0.0)
    sizes = dict(EVAL_PROBLEMS, kodcode_heldout=int(heldout * frac))
    limit = int(gen.get("limit") or 0)
    problems = sum(min(sizes.get(b, 0), limit) if limit else sizes.get(b, 0) for b in gen.get("benchmarks") or [])
    return (
        problems * n * int(gen.get("max_new_tokens", 512)),
        problems * n * int((cfg.get("evaluate") or {}).get("max_prompt_tokens") or 0),
    )


def plan_eval_jobs(cfg: Mapping) -> list[dict]:
    """The GPU evaluation jobs (vLLM back-end): one code-generation job per DHRCL run, one decompilation job per
    system (skeleton then skin, one engine at a time): memory and GPU-hours (:func:`eval_gpu_hours`, from token
    upper bounds: every response at its maximum length)."""
    ev = cfg.get("evaluate") or {}
    if cfg["device"] == "cpu" or ev.get("backend") == "transformers" or not ev.get("vllm"):
        return []
    gpu_gb, _ = gpu_memory_gb(cfg)
    jobs = []
    gen = ev.get("codegen") or {}
    d = cfg.get("dhrcl") or {}
    if gen and d.get("training"):
        from codegrpo.verl.dhrcl import plan_runs

        runs = plan_runs(cfg)
        for run in gen.get("runs") or list(runs):
            r = runs.get(run)
            init = r["init"] if r else d.get("init", "base")
            spec = model_spec(cfg, init)
            if spec:
                generated, prompts = codegen_tokens(cfg, gen)
                jobs.append(
                    {
                        "job": f"eval_codegen {run}",
                        "model": cfg["model"]["base"] if init == "base" else init,
                        "memory": eval_memory(spec, ev, int(gen.get("max_new_tokens", 512)), gpu_gb),
                        "generated_tokens": generated,
                        "gpu_hours": eval_gpu_hours(spec, generated, prompts, cfg),
                    }
                )
    dec = ev.get("decompile") or {}
    spec = model_spec(cfg, "base")
    if dec.get("systems") and spec:
        m = eval_memory(spec, ev, int(dec.get("max_new_tokens", 512)), gpu_gb)
        benchmarks = 1 + int(bool((dec.get("mbpp") or {}).get("enabled")))
        for s in dec["systems"]:
            phases = 2 if s.get("skin") else 1  # skeleton, then skin on its output
            tasks = DECOMPILE_TASKS * benchmarks * phases
            generated = tasks * int(dec.get("max_new_tokens", 512))
            prompts = tasks * int(ev.get("max_prompt_tokens") or 0)
            jobs.append(
                {
                    "job": f"eval_decompile_system {s['name']}",
                    "model": cfg["model"]["base"],
                    "memory": m,
                    "generated_tokens": generated,
                    "gpu_hours": eval_gpu_hours(spec, generated, prompts, cfg),
                }
            )
    return jobs


def build_budget(cfg: Mapping, *, use_files: bool = True) -> dict:
    """The budget of the plan (``use_files=False``: rows from ``budget.expected_rows`` even where the data stage
    has built its files, as for the checked-in paper table)."""
    jobs = plan_jobs(cfg, use_files=use_files)
    gpu_gb, gpu_source = gpu_memory_gb(cfg)
    disk = sum(j.get("disk_gb") or 0.0 for j in jobs)
    hours = sum(j.get("gpu_hours") or 0.0 for j in jobs)
    quota = (cfg.get("cluster") or {}).get("scratch_quota")
    evals = plan_eval_jobs(cfg)
    out = {
        "device": cfg["device"],
        "gpu_memory_gb": gpu_gb,
        "gpu_memory_source": gpu_source,
        "scratch_quota_gb": quota,
        "jobs": jobs,
        "eval_jobs": evals,
        "totals": {
            "jobs": len(jobs),
            "disk_gb": disk,
            "gpu_hours": hours,
            "eval_gpu_hours": sum(e.get("gpu_hours") or 0.0 for e in evals),
            "steps": sum(j.get("total_steps") or 0 for j in jobs),
        },
        "memory_model": dataclasses.asdict(MEMORY),
        "throughput_model": dataclasses.asdict(THROUGHPUT),
    }
    out["problems"] = budget_problems(out)
    return out


def _key(job: Mapping, key: str) -> str:
    """The config key that sets ``key`` for ``job`` (a model size's own entry when it overrides it)."""
    o = job.get("overrides")
    return f"{o['path']}.{key}" if o and key in o["keys"] else f"{job['section']}.{key}"


def budget_problems(budget: Mapping) -> list[str]:
    """What cannot run as planned, each with the number and the key to change."""
    problems = []
    for j in budget["jobs"]:
        run = j["run"]
        if j.get("batches_per_epoch") == 0:
            problems.append(
                f"{run}: {j['rows']} training rows ({j['rows_source']}) fill no batch of "
                f"{_key(j, 'train_batch_size')} = {j['train_batch_size']}"
                + (f" over {j['world']} GPUs" if j["kind"] == "sft" else "")
                + f"; lower {_key(j, 'train_batch_size')} to at most {j['rows']} or configure more data"
            )
        m = j.get("memory")
        if m and m.get("fits") is False:
            hint = (
                f"set {_key(j, 'gradient_checkpointing')}: true"
                if not m["gradient_checkpointing"]
                else f"lower {_key(j, 'ppo_micro_batch_size_per_gpu')}"
                if j["kind"] == "rl"
                else f"lower {_key(j, 'micro_batch_size_per_gpu')}"
            )
            if j["kind"] == "rl" and m.get("rollout_peak_gb", 0) >= m["train_peak_gb"]:
                hint = f"lower {_key(j, 'gpu_memory_utilization')} (rollout engine {m['rollout_engine_gb']:.1f} GB)"
            problems.append(
                f"{run}: about {m['peak_gb']:.1f} GB per GPU (training {m['train_peak_gb']:.1f}"
                + (f", rollout {m['rollout_peak_gb']:.1f}" if "rollout_peak_gb" in m else "")
                + f") exceeds the GPU's {m['gpu_gb']:.0f} GB ({budget['gpu_memory_source']}); {hint}"
            )
    for e in budget.get("eval_jobs") or []:
        m = e["memory"]
        if m.get("fits") is False:
            problems.append(
                f"{e['job']}: the vLLM engine's KV cache holds {m['kv_cache_tokens']} tokens, less than one "
                f"sequence of max_model_len {m['max_model_len']} (weights {m['weights_gb']:.1f} GB of the engine's "
                f"{m['engine_gb']:.1f} GB); raise evaluate.vllm.gpu_memory_utilization or "
                f"evaluate.vllm.tensor_parallel_size, or lower evaluate.max_prompt_tokens"
            )
    quota = budget.get("scratch_quota_gb")
    if quota and budget["totals"]["disk_gb"] > float(quota):
        problems.append(
            f"the plan keeps about {budget['totals']['disk_gb']:.0f} GB of checkpoints and exported models, over "
            f"cluster.scratch_quota = {quota} GB; lower max_checkpoints_to_keep of the RL sections (or sft.save_freq"
            f"), or raise cluster.scratch_quota"
        )
    return problems

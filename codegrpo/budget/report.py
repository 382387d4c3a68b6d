"""The budget as Markdown tables, ``results/budget.{md,json}`` and the command line
(``python -m codegrpo.budget``)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from codegrpo.budget.plan import build_budget


def _f(v, fmt="{:.1f}"):
    return "–" if v is None else fmt.format(v)


def budget_markdown(budget: Mapping, *, command: str | None = None) -> str:
    lines = ["# Plan-time budget", ""]
    if command:
        lines += [f"Regenerate with `{command}`.", ""]
    lines += [
        f"Device: {budget['device']}; GPU memory: {_f(budget['gpu_memory_gb'], '{:.0f}')} GB "
        f"({budget['gpu_memory_source']}); scratch quota: {_f(budget['scratch_quota_gb'], '{:.0f}')} GB.",
        "",
        "Rows are the Parquet files' when the data stage has run, else `budget.expected_rows`. Epochs are "
        "what verl is given: enough for the step budget (ceil(steps / batches per epoch)). Memory and "
        "GPU-hours follow the model of `codegrpo/budget/` (docs/budget.md); they are estimates.",
        "",
        "| run | model | rows | batches/epoch | epochs | steps | curriculum caps (stage 2 / 3 by step) | "
        "checkpoints kept × GB | disk GB | train peak GB/GPU | rollout peak GB/GPU | GPU | fits | GPU-hours |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for j in budget["jobs"]:
        c = j.get("curriculum")
        caps = (
            "–"
            if not c
            else ("none" if c["kind"] == "none" else f"{c['kind']}: {c['stage2_by_step']} / {c['stage3_by_step']}")
        )
        m = j.get("memory") or {}
        fits = {True: "yes", False: "**NO**", None: "–"}[m.get("fits")]
        lines.append(
            f"| {j['run']} | {j['model']} | {_f(j['rows'], '{:d}')} | {_f(j['batches_per_epoch'], '{:d}')} | "
            f"{_f(j['epochs'], '{:d}')} | {_f(j['total_steps'], '{:d}')} | {caps} | "
            f"{j['checkpoints_kept']} × {_f(j.get('checkpoint_gb'), '{:.3g}')} | {_f(j.get('disk_gb'), '{:.3g}')} | "
            f"{_f(m.get('train_peak_gb'))} | {_f(m.get('rollout_peak_gb'))} | {_f(m.get('gpu_gb'), '{:.0f}')} | "
            f"{fits} | {_f(j.get('gpu_hours'))} |"
        )
    t = budget["totals"]
    lines += [
        "",
        f"Totals: {t['jobs']} training jobs, {t['steps']} steps, about {t['disk_gb']:.0f} GB on disk once "
        f"every job has run (checkpoints kept + exported models), about {t['gpu_hours']:.0f} GPU-hours of "
        f"training"
        + (f" and at most {t['eval_gpu_hours']:.0f} of evaluation" if t.get("eval_gpu_hours") else "")
        + ".",
        "",
    ]
    rl = [j for j in budget["jobs"] if j.get("memory") and j["kind"] == "rl"]
    if rl:
        lines += [
            "Memory per GPU (GB) of each distinct RL plan:",
            "",
            "| run | FSDP state | activations (other setting) | logits | rollout engine | KV cache tokens / "
            "rollout tokens per engine |",
            "|---|---|---|---|---|---|",
        ]
        seen = set()
        for j in rl:
            m = j["memory"]
            key = (j["section"], j["model"])
            if key in seen:
                continue
            seen.add(key)
            lines.append(
                f"| {j['run']} | {m['state_gb']:.1f} | {m['activations_gb']:.1f} "
                f"({m['activations_other_setting_gb']:.1f} with gradient checkpointing "
                f"{'off' if m['gradient_checkpointing'] else 'on'}) | {m['logits_gb']:.1f} | "
                f"{_f(m.get('rollout_engine_gb'))} | {_f(m.get('kv_cache_tokens'), '{:d}')} / "
                f"{_f(m.get('rollout_tokens_per_engine'), '{:d}')} |"
            )
        lines.append("")
    ev = budget.get("eval_jobs") or []
    if ev:
        lines += [
            "Evaluation jobs (vLLM, one engine at a time; GPU-hours from upper bounds: every response at its "
            "maximum length, prompts at evaluate.max_prompt_tokens):",
            "",
            "| job | model | weights GB / TP rank | engine GB | KV cache tokens | max_model_len | fits | "
            "generated tokens (max) | GPU-hours (max) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for e in ev:
            m = e["memory"]
            fits = {True: "yes", False: "**NO**", None: "–"}[m.get("fits")]
            lines.append(
                f"| {e['job']} | {e['model']} | {m['weights_gb']:.1f} | {_f(m.get('engine_gb'))} | "
                f"{_f(m.get('kv_cache_tokens'), '{:d}')} | {m['max_model_len']} | {fits} | "
                f"{_f(e.get('generated_tokens'), '{:.3g}')} | {_f(e.get('gpu_hours'))} |"
            )
        lines.append("")
    if budget["problems"]:
        lines += ["## Problems (the plan is refused)", ""] + [f"- {p}" for p in budget["problems"]] + [""]
    else:
        lines += ["No problems: every job's steps are reachable and its memory and disk fit.", ""]
    return "\n".join(lines)


def write_budget(
    cfg: Mapping,
    out_json: str | os.PathLike | None,
    out_md: str | os.PathLike,
    *,
    command: str | None = None,
    use_files: bool = True,
) -> dict:
    """``out_md`` (the tables) and ``out_json`` (everything, when given)."""
    from codegrpo.io import atomic_open, write_json

    budget = build_budget(cfg, use_files=use_files)
    if out_json:
        write_json(out_json, budget)
    with atomic_open(out_md) as fh:
        fh.write(budget_markdown(budget, command=command))
    return budget


def main(argv: list[str] | None = None) -> int:
    from codegrpo import budget as package
    from codegrpo.config import load_config

    ap = argparse.ArgumentParser(description=package.__doc__.split("\n")[0])
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--md", default="results/budget.md")
    ap.add_argument("--json", default=None, help="also write the whole budget as JSON there")
    ap.add_argument(
        "--data",
        action="store_true",
        help="rows from the built Parquet files under results_dir where they exist (default: "
        "budget.expected_rows, the plan before any data is built)",
    )
    args = ap.parse_args(argv)
    cfg = load_config(args.config, check_files=False)
    cmd = f"python -m codegrpo.budget --config {args.config} --md {args.md}" + (" --data" if args.data else "")
    budget = write_budget(cfg, args.json, args.md, command=cmd, use_files=args.data)
    print(budget_markdown(budget))
    return 1 if budget["problems"] else 0

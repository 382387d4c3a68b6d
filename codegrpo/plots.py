"""Report figures (matplotlib, headless) from result files only.

* :func:`plot_run` — one training run: the score, every reward component, the KL terms and validation
  metrics per step (``results/runs/<run>/metrics.jsonl``), with the curriculum stage transitions
  (``results/runs/<run>/curriculum.json``) drawn as vertical lines.
* :func:`plot_reexec` — re-executability per optimisation level for every evaluated system, with the
  published SK²Decompile per-level row for reference.
* :func:`plot_codegen` — pass@1 / syntax / execution accuracy of the code-generation runs.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from codegrpo.io import atomic_path  # noqa: E402

SCORE_KEYS = ("critic/score/mean", "critic/rewards/mean")
_COMPONENT_RE = re.compile(r"^(reward|rewards|reward_components|components)/")
_VAL_RE = re.compile(r"^val-(core|aux)/(?P<base>.+)/mean@(?P<n>\d+)$")
PANELS = ("score", "component", "hack", "kl", "curriculum", "loss", "val")
HACK_KEYS = ("reward/hack_detected/mean",)  # the sandbox's harness guards (rate of samples per step)
TITLES = {
    "score": "score (mean reward)",
    "component": "reward components (batch means)",
    "hack": "harness guards fired (share of samples; a rising rate is a finding)",
    "kl": "KL",
    "curriculum": "curriculum stage",
    "loss": "SFT loss",
    "val": "validation (mean@n)",
}


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """Rows of a metrics.jsonl file, sorted by step (bad lines raise with file and line)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                int(row["step"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}: line {lineno}: not a metrics line ({exc})") from exc
            rows.append(row)
    rows.sort(key=lambda r: int(r["step"]))
    return rows


def classify(key: str) -> str | None:
    """Which panel a metric belongs to (see ``PANELS``), or None (not plotted)."""
    if key == "step":
        return None
    low = key.lower()
    if key in SCORE_KEYS:
        return "score"
    if key in HACK_KEYS:
        return "hack"
    if low.startswith("reward/hack_guard/"):
        return None  # a per-sample code, its mean means nothing
    if low in ("train/loss", "val/loss"):
        return "loss"
    if low.startswith("curriculum/") or low in ("dhrcl/stage", "curriculum_stage"):
        return "curriculum"
    if _VAL_RE.match(low):
        return None if "/stage/" in low else "val"
    if low.startswith("val"):
        return None
    if "kl" in low.split("/")[-1] or low.startswith("actor/kl") or "/kl" in low:
        return "kl"
    if _COMPONENT_RE.match(low) or "component" in low:
        return None if "/stage/" in low else "component"
    return None


def _highest_n_only(keys: list[str]) -> list[str]:
    """Of validation keys ``.../mean@N``, keep for each metric the one with the largest N."""
    best: dict[str, tuple[int, str]] = {}
    for k in keys:
        m = _VAL_RE.match(k.lower())
        base, n = m.group("base"), int(m.group("n"))
        if base not in best or n > best[base][0]:
            best[base] = (n, k)
    return [k for k in keys if best[_VAL_RE.match(k.lower()).group("base")][1] == k]


def read_transitions(path: str | os.PathLike | None) -> list[tuple[int, str]]:
    """(step, label) of each curriculum stage transition in a curriculum.json, [] when absent."""
    if not path or not Path(path).is_file():
        return []
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    items = data.get("transitions") if isinstance(data, dict) else data
    out = []
    for t in items or []:
        if isinstance(t, dict) and "step" in t:
            label = t.get("to") or t.get("stage") or t.get("to_stage") or ""
            label = f"stage {label}" if isinstance(label, int) else str(label)
            out.append((int(t["step"]), label))
    return out


def _series(rows: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def plot_run(
    metrics_path: str | os.PathLike,
    out_path: str | os.PathLike,
    run: str | None = None,
    curriculum_path: str | os.PathLike | None = None,
) -> dict:
    """Figure of one run; returns which keys were drawn on each panel.

    A run without a metrics file (an imported checkpoint, not trained here) gets a figure saying so.
    """
    rows = read_metrics(metrics_path) if Path(metrics_path).is_file() else []
    keys: dict[str, list[str]] = {p: [] for p in PANELS}
    for r in rows:
        for k, v in r.items():
            panel = classify(k)
            if panel and k not in keys[panel] and isinstance(v, (int, float)) and not isinstance(v, bool):
                keys[panel].append(k)
    keys["val"] = _highest_n_only(keys["val"])
    transitions = read_transitions(curriculum_path)
    panels = [p for p in PANELS if keys[p]] or ["score"]
    titles = TITLES
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), sharex=True, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        for k in keys[panel]:
            xs, ys = _series(rows, k)
            if xs:
                ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=k, linewidth=1.2)
        for step, label in transitions:
            ax.axvline(step, color="grey", linestyle="--", linewidth=0.8)
            if panel == panels[0]:
                ax.annotate(
                    label,
                    (step, 1.0),
                    xycoords=("data", "axes fraction"),
                    fontsize=7,
                    rotation=90,
                    va="top",
                    ha="right",
                    color="grey",
                )
        ax.set_title(titles[panel], fontsize=9)
        if keys[panel]:
            ax.legend(fontsize=6, loc="best", ncol=2)
        else:
            ax.text(0.5, 0.5, "no metrics logged", transform=ax.transAxes, ha="center", va="center")
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1, 0].set_xlabel("training step")
    what = f"{len(rows)} steps" if Path(metrics_path).is_file() else "no metrics.jsonl (not trained here)"
    fig.suptitle(f"run {run or Path(metrics_path).parent.name}: {what}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_path)
    return {"panels": {p: keys[p] for p in panels}, "transitions": transitions, "steps": len(rows)}


REEXEC_PANELS = (
    ("humaneval_decompile", "humaneval", "HumanEval-Decompile"),
    ("mbpp_decompile", "mbpp", "MBPP-Decompile"),
)


def plot_reexec(results: Iterable[dict], out_path: str | os.PathLike, published: dict | None = None) -> int:
    """Grouped bars: re-executability per level for each evaluated system (+ published SK²Decompile), one panel
    per decompilation benchmark that has results (HumanEval-Decompile, MBPP-Decompile)."""
    levels = ("O0", "O1", "O2", "O3")
    results = [r for r in results if r.get("kind") == "decompile"]
    panels = []
    for bench, key, title in REEXEC_PANELS:
        series = []
        for res in results:
            if res.get("benchmark", "humaneval_decompile") == bench:
                label = f"{res.get('label') or res['system']} [{res.get('protocol') or 'llm4decompile'}]"
                series.append((label, [res["reexec"].get(lv, 0.0) for lv in levels]))
        if not series:
            continue
        for pub in (published or {}).get("reexec", []):
            vals = pub.get(key, {})
            if all(lv in vals for lv in levels):
                series.append((f"{pub['method']} (published)", [vals[lv] for lv in levels]))
        panels.append((title, series))
    if not panels:
        panels.append(("HumanEval-Decompile", []))
    tallest = max(len(series) for _, series in panels)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(8, (3.5 + 0.25 * ((tallest + 2) // 3)) * len(panels)), squeeze=False
    )
    for ax, (title, series) in zip(axes[:, 0], panels):
        width = 0.8 / max(1, len(series))
        for i, (label, vals) in enumerate(series):
            ax.bar([j + i * width for j in range(len(levels))], vals, width, label=label)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(levels))], levels)
        ax.set_ylabel("re-executability (%)")
        ax.set_ylim(0, 105)
        ax.set_title(f"{title} re-executability by optimisation level", fontsize=10)
        if series:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out_path)
    return sum(len(series) for _, series in panels)


def plot_codegen(results: Iterable[dict], out_path: str | os.PathLike) -> int:
    """Bars per code-generation system: pass@1 per benchmark, syntax and execution accuracy."""
    rows = [r for r in results if r.get("kind") == "codegen"]
    labels = [f"{r.get('label') or r['system']}\n{r['benchmark']}" for r in rows]
    metrics = [
        ("pass@1", lambda r: r["pass@k"].get("1", 0.0)),
        ("syntax acc", lambda r: r["syntax_acc"]),
        ("exec acc", lambda r: r["exec_acc"]),
    ]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows) + 2), 3.5))
    width = 0.8 / len(metrics)
    for i, (name, fn) in enumerate(metrics):
        ax.bar([j + i * width for j in range(len(rows))], [fn(r) for r in rows], width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))], labels, fontsize=6)
    ax.set_ylabel("%")
    ax.set_ylim(0, 105)
    ax.set_title("Code generation (DHRCL runs and reference)", fontsize=10)
    ax.legend(fontsize=7, loc="upper right", ncol=3)
    ax.set_ylim(0, 115)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out_path)
    return len(rows)


def save_figure(fig, out_path: str | os.PathLike) -> None:
    with atomic_path(out_path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)

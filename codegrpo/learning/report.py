"""The learning checks' report page (:mod:`codegrpo.learning`): verdict tables, the toy reward curves and the
curriculum run's stage timeline."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

from codegrpo.io import atomic_path


def write_report(
    directions: Mapping[str, Mapping],
    curriculum: Mapping | None,
    out_md: str | os.PathLike,
    rewards_png: str | os.PathLike,
    timeline_png: str | os.PathLike | None = None,
) -> bool:
    """The "learning check" page: a verdict table, the toy reward curves (each loss and the sign-flipped
    control) and the curriculum run's stage timeline. Returns whether every check passed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codegrpo.plots import save_figure

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, v in directions.items():
        curve = v["curve"]
        ax.plot(
            range(1, len(curve) + 1),
            curve,
            marker="o",
            ms=3,
            label=f"{name} ({'pass' if v['passed'] else 'FAIL'})",
            ls="--" if v["expect"] == "down" else "-",
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("mean toy reward (share of target characters)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Learning check on toy data: reward per step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, rewards_png)

    lines = [
        "# Learning check (mechanism checks on toy data; not paper results)",
        "",
        "Direction checks: GRPO on the toy reward `toy_target_chars` through the real verl path; a run passes "
        "when the mean reward of its last k steps differs from that of its first k steps by more than the "
        "margin, upwards for each loss and downwards for the sign-flipped control.",
        "",
        "| check | loss_mode | expect | first k | last k | change | margin | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in directions.items():
        lines.append(
            f"| {name} | {v.get('loss_mode', '')} | {v['expect']} | {v['first']:.3f} | {v['last']:.3f} | "
            f"{v['delta']:+.3f} | {v['margin']} | {'pass' if v['passed'] else 'FAIL'} |"
        )
    ok = all(v["passed"] for v in directions.values())
    lines += ["", f"![toy reward curves]({Path(rewards_png).name})", ""]
    if curriculum is not None:
        ok = ok and bool(curriculum["passed"])
        lines += [
            "## Curriculum advanced by its trend",
            "",
            f"DHRCL (variant full) after SFT on a few KodCode reference solutions; trend settings "
            f"`{json.dumps(curriculum['trend'])}`, {curriculum['total_steps']} steps. Verdict: "
            f"{'pass' if curriculum['passed'] else 'FAIL'} (reached stage {curriculum['reached_stage']}).",
            "",
            "| step | from → to | kind | metric | value | slope | window | token weights |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for t in curriculum["transitions"]:
            tw = t.get("token_weights") or {}
            slope = "" if t.get("slope") is None else f"{t['slope']:+.4f}"
            value = "" if t.get("value") is None else f"{t['value']:.3f}"
            lines.append(
                f"| {t['step']} | {t['from']} → {t['to']} | {t.get('kind')} | {t.get('metric')} | {value} | "
                f"{slope} | {t.get('window')} | {tw.get('from', '')} → {tw.get('to', '')} |"
            )
        lines += ["", "| step | stage | gate in force | gate value | score |", "|---|---|---|---|---|"]
        for r in curriculum["timeline"]:
            gv = "" if r["gate_value"] is None else f"{r['gate_value']:.3f}"
            sc = "" if r["score"] is None else f"{r['score']:.3f}"
            lines.append(f"| {r['step']} | {r['stage']} | {r['gate']} | {gv} | {sc} |")
        if timeline_png is not None and curriculum["timeline"]:
            fig, ax = plt.subplots(figsize=(7, 3.5))
            steps = [r["step"] for r in curriculum["timeline"]]
            ax.step(steps, [r["stage"] for r in curriculum["timeline"]], where="post", label="stage", color="k")
            ax2 = ax.twinx()
            for key in ("a_syntax", "a_exec", "a_pass"):
                ax2.plot(
                    steps,
                    [r[key] if r[key] is not None else float("nan") for r in curriculum["timeline"]],
                    marker="o",
                    ms=3,
                    label=key,
                )
            ax.set_xlabel("training step")
            ax.set_ylabel("curriculum stage")
            ax.set_yticks([1, 2, 3])
            ax2.set_ylabel("batch-mean gate")
            ax2.set_ylim(-0.02, 1.02)
            ax.set_title("Curriculum stage timeline and reward gates")
            fig.legend(fontsize=8, loc="lower right")
            fig.tight_layout()
            save_figure(fig, timeline_png)
            lines += ["", f"![curriculum timeline]({Path(timeline_png).name})"]
    lines.append("")
    with atomic_path(out_md) as tmp:
        Path(tmp).write_text("\n".join(lines), encoding="utf-8")
    return ok

"""Throughput of the structure reward (exe_type) on a GRPO-shaped batch: batch engine vs the reference procedure.

The batch: 16 prompts of the shipped RL examples × 16 samples each — exact answers, renamed placeholders,
deleted lines, syntax errors, empty answers, and about 30 % duplicates inside each group (what a policy
produces). Three numbers, measured in this process:

* baseline — the reference procedure, serial: a fresh temp dir and ``gcc -c`` per sample;
* engine   — ``compute_score_batch`` for ``sk2decompile_structure`` (dedupe, parallel gcc, RAM scratch, fast
             mode), with a cold cache; also a warm second step (cache hits) and exact mode for comparison;
* floor    — the bare ``gcc -c`` time of the batch's unique sources, divided by the cores.

Scores of the engine must equal the baseline's (checked, the script fails otherwise).

    .venv/bin/python benchmarks/bench_sk2d_rewards.py [--prompts 16] [--samples 16] [--repeats 3] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from codegrpo.rewards import compute_score_batch, sk2d  # noqa: E402
from codegrpo.contracts import gcc_version  # noqa: E402
from codegrpo.rewards.compile import GCC, CompileEngine, render_source  # noqa: E402

DATA = REPO / "data" / "sk2decompile" / "sk2decompile-rl-examples.jsonl"
_PH = re.compile(r"\b(func|type|var|field)(\d+)\b")


def _variant(gt: str, kind: str, rng: random.Random) -> str:
    lines = gt.split("\n")
    if kind == "exact":
        return gt
    if kind == "renamed":  # placeholders renumbered (still compiles when the header declares them... or not)
        shift = rng.randrange(1, 6)
        return _PH.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + shift}", gt)
    if kind == "deleted":
        if len(lines) > 2:
            del lines[rng.randrange(1, len(lines) - 1)]
        return "\n".join(lines)
    if kind == "syntax":
        idx = [i for i, c in enumerate(gt) if c in ";)}"]
        i = rng.choice(idx) if idx else 0
        return gt[:i] + gt[i + 1 :]
    if kind == "empty":
        return ""
    raise ValueError(kind)


def build_batch(n_prompts: int, n_samples: int, seed: int = 0):
    rows = [json.loads(line) for line in DATA.open(encoding="utf-8")]
    rng = random.Random(seed)
    chosen = rng.sample(rows, n_prompts)
    kinds = [
        "exact",
        "exact",
        "renamed",
        "renamed",
        "deleted",
        "deleted",
        "deleted",
        "syntax",
        "syntax",
        "syntax",
        "empty",
    ]
    sols, gts, infos = [], [], []
    for r in chosen:
        gt = r["reward_model"]["ground_truth"]
        group = []
        for j in range(n_samples):
            if group and rng.random() < 0.1:
                group.append(rng.choice(group))  # duplicate of an earlier sample of the same prompt
            else:
                group.append(_variant(gt, kinds[j % len(kinds)], rng))
        sols += group
        gts += [gt] * n_samples
        infos += [r["extra_info"]] * n_samples
    return sols, gts, infos


def baseline(sols, gts, infos):
    return [sk2d.exe_type(s, g, e)["score"] for s, g, e in zip(sols, gts, infos)]


def bare_compile_seconds(sources) -> float:
    """Sum of the wall time of `gcc -c` alone (no Python work besides the spawn) for each source."""
    total = 0.0
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
        src = os.path.join(d, "temp.c")
        for text in sources:
            with open(src, "w") as fh:
                fh.write(text)
            t0 = time.perf_counter()
            subprocess.run(
                ["gcc", "-c", "temp.c", "-o", "temp.o"], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            total += time.perf_counter() - t0
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0, help="engine workers (default: the engine default, 2 per core)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with CompileEngine(workers=args.workers or None) as probe:
        workers = probe.workers

    sols, gts, infos = build_batch(args.prompts, args.samples, args.seed)
    n = len(sols)
    sources = [render_source(e.get("header", ""), s) for s, e in zip(sols, infos)]
    unique = list(dict.fromkeys(sources))
    print(f"gcc: {gcc_version(GCC)}; cores: {cores}; engine workers: {workers}")
    print(
        f"batch: {args.prompts} prompts x {args.samples} samples = {n}; unique sources {len(unique)} "
        f"({100 * (1 - len(unique) / n):.0f}% duplicates)"
    )

    base_times = []
    for _ in range(max(1, min(args.repeats, 2))):  # the baseline is slow: at most two runs
        t0 = time.perf_counter()
        ref = baseline(sols, gts, infos)
        base_times.append(time.perf_counter() - t0)
    t_base = statistics.median(base_times)
    print(
        f"baseline (reference, serial):  {t_base:7.3f} s  {n / t_base:8.1f} samples/s   "
        f"(runs: {', '.join(f'{t:.2f}' for t in base_times)} s)   "
        f"scores: {sum(x > 0 for x in ref)}/{n} nonzero, mean {statistics.mean(ref):.3f}"
    )

    def run_engine(mode: str):
        times, warm = [], None
        for _ in range(args.repeats):
            with CompileEngine(workers=workers, mode=mode) as eng:
                t0 = time.perf_counter()
                out = compute_score_batch(["sk2decompile_structure"] * n, sols, gts, infos, engine=eng)
                times.append(time.perf_counter() - t0)
                got = [o["score"] for o in out]
                if got != ref:
                    bad = [i for i, (a, b) in enumerate(zip(got, ref)) if a != b]
                    raise SystemExit(f"engine ({mode}) scores differ from the baseline at samples {bad[:10]}")
                t1 = time.perf_counter()
                compute_score_batch(["sk2decompile_structure"] * n, sols, gts, infos, engine=eng)
                warm = time.perf_counter() - t1
        return times, warm

    results = {}
    for mode in ("fast", "exact"):
        times, warm = run_engine(mode)
        best, med = min(times), statistics.median(times)
        results[mode] = med
        print(
            f"engine {mode:5s} (cold cache):     {med:7.3f} s  {n / med:8.1f} samples/s   "
            f"(best {n / best:.1f}/s over {len(times)} runs)   x{t_base / med:.1f} vs baseline (best "
            f"x{t_base / best:.1f}); warm step {warm * 1000:.1f} ms"
        )

    t_bare = bare_compile_seconds(unique)
    floor_s = t_bare / cores
    print(
        f"floor (bare gcc -c of {len(unique)} unique sources / {cores} cores): {floor_s:7.3f} s  "
        f"{n / floor_s:8.1f} samples/s"
    )
    print(
        f"RESULT ratio engine/baseline = {t_base / results['fast']:.2f}x ; engine time / floor = "
        f"{results['fast'] / floor_s:.2f} (exact mode: x{t_base / results['exact']:.2f}, "
        f"{results['exact'] / floor_s:.2f} of floor); identical scores: yes"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

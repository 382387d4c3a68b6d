"""Benchmark: sandbox fork server vs a fresh interpreter (pytest import) per sample, same isolation.

Runs the same KodCode (solution, tests) pairs through ``Sandbox(mode="fresh")`` (baseline: a new supervisor
process per sample, which imports pytest) and ``Sandbox(mode="server")`` (fork server with pytest already
imported), checks that both give identical results, and prints the speed ratio (goal: >= 5x).

    .venv/bin/python benchmarks/bench_sandbox.py [--n 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

from codegrpo.sandbox import Sandbox, SandboxLimits

REPO = Path(__file__).resolve().parent.parent


def _pairs(n: int) -> list[tuple[str, str]]:
    recs = []
    for f in sorted((REPO / "data" / "kodcode").glob("*.json")):
        recs += json.loads(f.read_text())
    recs = [r for r in recs if "timeit" not in r["test_code"]]  # keep timing-sensitive tests out of the check
    out = []
    for i, r in enumerate(recs[:n]):
        # alternate correct and broken solutions so both outcomes are compared
        sol = r["solution"] if i % 3 else "raise RuntimeError('broken at import')\n"
        out.append((sol, r["test_code"]))
    return out


def _run(pairs) -> tuple[list[float], list[float], list[tuple], list[tuple]]:
    """Each pair through both modes, interleaved (fresh, server, fresh, ...) so that load changes on a shared
    machine hit both alike; per-sample wall times and outcomes."""
    lim = SandboxLimits(wall_s=30, cpu_s=30)
    t_fresh, t_server, r_fresh, r_server = [], [], [], []
    with Sandbox(lim, mode="fresh") as fresh, Sandbox(lim, mode="server") as server:
        server.run_tests("x = 1\n", "def test_x():\n    assert x == 1\n")  # warm-up (supervisor start)
        for sol, tests in tqdm(pairs, desc="sandbox bench", unit="pair"):
            for sb, times, outs in ((fresh, t_fresh, r_fresh), (server, t_server, r_server)):
                t0 = time.perf_counter()
                r = sb.run_tests(sol, tests)
                times.append(time.perf_counter() - t0)
                outs.append((r.executed, r.passed, r.total, r.timed_out))
    return t_fresh, t_server, r_fresh, r_server


def _run_batch(pairs, workers: int) -> tuple[float, list[tuple]]:
    """The reward path: the whole batch through ``run_tests_many`` on ``workers`` fork servers; wall time, outcomes."""
    lim = SandboxLimits(wall_s=30, cpu_s=30)
    with Sandbox(lim, mode="server", workers=workers) as server:
        server.run_tests_many([("x = 1\n", "def test_x():\n    assert x == 1\n")] * workers)  # warm-up
        t0 = time.perf_counter()
        res = server.run_tests_many(pairs)
        wall = time.perf_counter() - t0
    return wall, [(r.executed, r.passed, r.total, r.timed_out) for r in res]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30, help="number of (solution, tests) pairs")
    ap.add_argument("--target", type=float, default=5.0)
    args = ap.parse_args(argv)
    pairs = _pairs(args.n)
    t_fresh, t_server, r_fresh, r_server = _run(pairs)
    same = r_fresh == r_server
    ratio = sum(t_fresh) / sum(t_server)
    med_ratio = statistics.median(t_fresh) / statistics.median(t_server)
    load = os.getloadavg()[0]
    print(
        f"samples={len(pairs)} fresh: total {sum(t_fresh):.2f}s, median {1000 * statistics.median(t_fresh):.0f} ms "
        f"| server: total {sum(t_server):.2f}s, median {1000 * statistics.median(t_server):.0f} ms "
        f"| load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"speedup fork-server vs fresh process: {ratio:.1f}x total, {med_ratio:.1f}x median "
        f"(target >= {args.target:.0f}x); identical results: {same}"
    )
    workers = os.cpu_count() or 1
    t_batch, r_batch = _run_batch(pairs, workers)
    same_batch = r_batch == r_fresh
    print(
        f"batch as the DHRCL reward runs it ({workers} fork servers, run_tests_many): {t_batch:.2f}s "
        f"-> {sum(t_fresh) / t_batch:.1f}x the fresh-process-per-sample total; identical results: {same_batch}"
    )
    same = same and same_batch
    if not same:
        for i, (a, b) in enumerate(zip(r_fresh, r_server)):
            if a != b:
                print(f"  mismatch at {i}: fresh={a} server={b}")
    return 0 if same and med_ratio >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: sandbox fork server vs a fresh interpreter (pytest import) per sample, same isolation.

Runs the same KodCode (solution, tests) pairs through ``Sandbox(mode="fresh")`` (baseline: a new supervisor
process per sample, which imports pytest) and ``Sandbox(mode="server")`` (fork server with pytest already
imported), checks that both give identical results, and prints the speed ratio (goal: >= 5x).

    .venv/bin/python benchmarks/bench_sandbox.py [--n 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from codegrpo.execution import Sandbox, SandboxLimits

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


def _run(mode: str, pairs) -> tuple[float, list[tuple]]:
    with Sandbox(SandboxLimits(wall_s=30, cpu_s=30), mode=mode) as sb:
        sb.run_tests("x = 1\n", "def test_x():\n    assert x == 1\n")  # warm-up (supervisor start)
        t0 = time.perf_counter()
        res = [sb.run_tests(s, t) for s, t in pairs]
        dt = time.perf_counter() - t0
    return dt, [(r.executed, r.passed, r.total, r.timed_out) for r in res]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30, help="number of (solution, tests) pairs")
    ap.add_argument("--target", type=float, default=5.0)
    args = ap.parse_args(argv)
    pairs = _pairs(args.n)
    t_fresh, r_fresh = _run("fresh", pairs)
    t_server, r_server = _run("server", pairs)
    same = r_fresh == r_server
    ratio = t_fresh / t_server if t_server > 0 else float("inf")
    print(f"samples={len(pairs)} fresh={t_fresh:.2f}s ({1000 * t_fresh / len(pairs):.0f} ms/sample) "
          f"server={t_server:.2f}s ({1000 * t_server / len(pairs):.0f} ms/sample)")
    print(f"speedup fork-server vs fresh process: {ratio:.1f}x (target >= {args.target:.0f}x); "
          f"identical results: {same}")
    if not same:
        for i, (a, b) in enumerate(zip(r_fresh, r_server)):
            if a != b:
                print(f"  mismatch at {i}: fresh={a} server={b}")
    return 0 if same and ratio >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())

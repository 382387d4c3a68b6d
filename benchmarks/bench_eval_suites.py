"""Benchmark: the evaluation suites' per-sample cost in the sandbox (fork server, one worker).

Scores the shipped samples (data/codegen_samples: HumanEval+, LiveCodeBench, BigCodeBench-Hard) ``--rounds``
times each, the reference solution and a wrong one per task, and prints the median and total time per sample
for each suite with the verdicts. Only the public scorer API is used, so the same script measures another
checkout of the repository (``PYTHONPATH=<checkout>``): that is how docs/sandbox.md compares the harness before
and after the runner/candidate split.

    .venv/bin/python benchmarks/bench_eval_suites.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from codegrpo.eval import suites as s
from codegrpo.sandbox import Sandbox, SandboxLimits

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "data" / "codegen_samples"
CFG = {
    "evalplus": {"min_time_limit_s": 1.0, "task_timeout_s": 10},
    "bigcodebench": {"timeout_s": 20},
    "livecodebench": {"timeout_s": 2, "task_timeout_s": 30},
}


def _suites():
    he = s.load_evalplus("humaneval_plus", SAMPLES / "HumanEvalPlus-sample.jsonl")
    lcb = s.load_livecodebench(SAMPLES / "livecodebench", "v6", solutions=SAMPLES / "livecodebench-solutions.jsonl")
    bcb = s.load_bigcodebench("bigcodebench_hard", str(SAMPLES / "bigcodebench-hard-sample.jsonl"), "v0.1.4")
    wrong = "def _cg_unused():\n    pass\n"  # defines no entry point: fails every task
    return {
        "humaneval_plus": (he, lambda p, code, sb: s.score_evalplus(p, code, 0, sb, 10, CFG["evalplus"]), wrong),
        "livecodebench": (
            lcb,
            lambda p, code, sb: s.score_livecodebench(p, code, 0, sb, 2, CFG["livecodebench"]),
            "print(0)\n",
        ),
        "bigcodebench_hard": (
            bcb,
            lambda p, code, sb: s.score_bigcodebench(p, code, 0, sb, 20, CFG["bigcodebench"]),
            wrong,
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with Sandbox(SandboxLimits(wall_s=60, cpu_s=60, memory_mb=4096, nproc=64, fsize_mb=8)) as sb:
        print(f"# mechanism {sb.mechanism}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        for name, (probs, score, wrong) in _suites().items():
            for p in probs:  # warm-up: EvalPlus's ground truth is computed once per task
                score(p, p.reference, sb)
            times, verdicts = [], set()
            for _ in range(args.rounds):
                for p in probs:
                    for code, want in ((p.reference, True), (wrong, False)):
                        t0 = time.perf_counter()
                        r = score(p, code, sb)
                        times.append(time.perf_counter() - t0)
                        verdicts.add(r.passed == want)
            print(
                f"{name}: {len(times)} samples, median {1000 * statistics.median(times):.0f} ms, "
                f"total {sum(times):.2f} s; verdicts as expected: {verdicts == {True}}"
            )


if __name__ == "__main__":
    main()

"""Header validation of the shipped RL file: parallel gcc checks vs one at a time, same process.

Runs ``validate_headers`` on the 100 shipped RL rows with ``workers=1`` (baseline) and with one worker per
available CPU, checks that both give identical statuses, and prints the time of each and the ratio.

    .venv/bin/python benchmarks/bench_data_headers.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from codegrpo.data.headers import PsycheC, validate_headers
from codegrpo.data.ingest import ingest_dataset

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    recs = ingest_dataset(
        "rl",
        {"path": str(REPO / "data/sk2decompile/sk2decompile-rl-examples.jsonl"), "shape": "verl", "stage": "skeleton"},
    ).records
    psychec = PsycheC()
    workers = len(os.sched_getaffinity(0))
    best = {}
    statuses = {}
    for label, n in (("serial", 1), (f"parallel x{workers}", workers)):
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out, summary = validate_headers(recs, psychec=psychec, workers=n)
            times.append(time.perf_counter() - t0)
        best[label] = min(times)
        statuses[label] = [r["header_status"] for r in out]
        print(f"{label:>14}: {best[label]:.2f} s for {len(recs)} records  {summary['status_counts']}")
    a, b = statuses.values()
    assert a == b, "parallel and serial statuses differ"
    t_serial, t_par = best.values()
    print(f"speed-up: {t_serial / t_par:.2f}x with {workers} workers")


if __name__ == "__main__":
    main()

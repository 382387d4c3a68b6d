"""The default pipeline from a fresh copy: wall time, CPU time / wall time, the per-rule breakdown, the load.

Clones this checkout's committed HEAD (``git clone``) into a temporary folder, points the copy's ``.venv`` at the
virtual environment running this script (nothing is installed), puts the copy first on ``PYTHONPATH`` (so its own
``codegrpo`` is imported, not an editable install's) and runs ``snakemake --cores N`` there, then prints

* the wall time of the run and the CPU time (user + sys) of everything it started, over the wall time (the
  average number of busy cores; the issue's target is >= 1.6 of 2): counted in a cpuacct cgroup of its own where
  one can be made (root, cgroup v1), else only the processes the run waited for, which misses Ray's daemons (a
  lower bound: 382 s of the 659 s a cgroup counted on 2026-12-04);
* per rule, summed over its jobs, from the run's Snakemake log: jobs, seconds, the longest job; and the sum of all
  job durations over the wall time (how many jobs ran side by side on average);
* the machine: its CPUs, the load average before and after, and the share of the machine's CPU time that was
  busy during the run (with other work on the machine this is more than the run's own share).

    .venv/bin/python benchmarks/bench_pipeline.py [--cores 2] [--keep] [--json out.json] [target ...]

A benchmark, not a test: the README's figures come from it (with the date and the load it prints). Uncommitted
changes of the checkout are not in the copy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?rule (\S+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+)|^Finished job (\d+)\.")


def parse_log(text: str) -> list[dict]:
    """Jobs of a Snakemake log: ``{"rule", "jobid", "start", "end", "seconds"}`` (1 s resolution), in start order.
    Jobs that never finished (a failed run) are left out."""
    now: datetime | None = None
    pending_rule: str | None = None
    started: dict[int, tuple[str, datetime]] = {}
    jobs = []
    for line in text.splitlines():
        if m := _STAMP.match(line):
            now = datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
        elif m := _RULE.match(line):
            pending_rule = m.group(1)
        elif (m := _JOBID.match(line)) and pending_rule is not None and now is not None:
            started[int(m.group(1))] = (pending_rule, now)
            pending_rule = None
        elif (m := _FINISHED.match(line)) and now is not None:
            jobid = int(m.group(1) or m.group(2))
            if jobid in started:
                rule, t0 = started.pop(jobid)
                jobs.append(
                    {
                        "rule": rule,
                        "jobid": jobid,
                        "start": t0.isoformat(),
                        "end": now.isoformat(),
                        "seconds": (now - t0).total_seconds(),
                    }
                )
    return sorted(jobs, key=lambda j: (j["start"], j["jobid"]))


def per_rule(jobs: list[dict]) -> dict[str, dict]:
    """Jobs, summed seconds and the longest job of each rule, the costliest rule first."""
    out: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "seconds": 0.0, "longest": 0.0})
    for j in jobs:
        r = out[j["rule"]]
        r["jobs"] += 1
        r["seconds"] += j["seconds"]
        r["longest"] = max(r["longest"], j["seconds"])
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["seconds"]))


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


_CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def cpu_cgroup(name: str) -> Path | None:
    """A cgroup-v1 cpuacct group of our own (counts every descendant, also the daemons Ray starts, which the
    run never waits for), or None where none can be made (then only waited-for processes are counted)."""
    try:
        cg = _CPUACCT / name
        cg.mkdir()
        return cg
    except OSError:
        return None


def fresh_copy(dest: Path, venv: Path) -> Path:
    """``git clone`` of this checkout into ``dest/codegrpo`` with ``.venv`` -> ``venv`` and ``../shared`` (the
    shared read-only material, when the checkout has one beside it) linked."""
    work = dest / "codegrpo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(work)], check=True)
    (work / ".venv").symlink_to(venv)
    shared = REPO.parent / "shared"
    if shared.is_dir() and not (dest / "shared").exists():
        (dest / "shared").symlink_to(shared.resolve())
    return work


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help="Snakemake targets (default: the default target, all)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument(
        "--venv",
        type=Path,
        default=Path(sys.executable).parent.parent,
        help="virtual environment with snakemake (default: the one running this script)",
    )
    ap.add_argument("--workdir", type=Path, default=None, help="where to make the copy (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the copy and its results")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)

    venv = args.venv.resolve()
    snakemake = venv / "bin" / "snakemake"
    if not snakemake.exists():
        ap.error(f"{snakemake} does not exist (--venv)")
    base = Path(tempfile.mkdtemp(prefix="bench-pipeline-", dir=args.workdir))
    work = fresh_copy(base, venv)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=work, capture_output=True, text=True).stdout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(work), os.environ.get("PYTHONPATH")]))}
    cmd = [str(snakemake), "--cores", str(args.cores), *args.targets]
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  commit {head.strip()}  {' '.join(cmd)}  in {work}", flush=True)

    load_before = os.getloadavg()
    busy0, total0 = _cpu_ticks()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    cg = cpu_cgroup(f"bench-pipeline-{os.getpid()}")

    def enter_cgroup():  # in the child, before snakemake starts: everything it starts is counted
        (cg / "cgroup.procs").write_text(str(os.getpid()))

    proc = subprocess.run(
        cmd,
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=enter_cgroup if cg else None,
    )
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cg_cpu = None
    if cg:
        cg_cpu = int((cg / "cpuacct.usage").read_text()) / 1e9
        try:
            cg.rmdir()
        except OSError:  # a process of the run is still alive in it
            pass
    busy1, total1 = _cpu_ticks()
    load_after = os.getloadavg()

    logs = sorted((work / ".snakemake" / "log").glob("*.snakemake.log"))
    jobs = parse_log(logs[-1].read_text(errors="replace")) if logs else []
    rules = per_rule(jobs)
    waited = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    cpu = cg_cpu if cg_cpu is not None else waited
    ncpu = os.cpu_count() or 1
    job_sum = sum(j["seconds"] for j in jobs)
    figures = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": head.strip(),
        "command": cmd,
        "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "cpu_counted": "cgroup (every descendant)"
        if cg_cpu is not None
        else "waited-for processes only (a lower bound)",
        "cpu_waited_s": round(waited, 1),
        "cpu_per_wall": round(cpu / wall, 2),
        "jobs": len(jobs),
        "job_seconds_sum": job_sum,
        "jobs_side_by_side": round(job_sum / wall, 2) if wall else None,
        "rules": rules,
        "machine": {
            "cpus": ncpu,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in load_after],
            "busy_cores_during_run": round(ncpu * (busy1 - busy0) / max(1, total1 - total0), 2),
        },
    }
    if proc.returncode != 0:
        print(proc.stdout[-5000:])
    print(
        f"\nwall {wall:.0f} s ({wall / 60:.1f} min)   CPU {cpu:.0f} s   CPU/wall {cpu / wall:.2f} of {args.cores} cores"
        f"   exit {proc.returncode}   (CPU of {figures['cpu_counted']})"
    )
    print(f"jobs {len(jobs)}   sum of job durations {job_sum:.0f} s = {figures['jobs_side_by_side']} x wall")
    print(
        f"machine: {ncpu} CPUs, load {' '.join(f'{x:.2f}' for x in load_before)} before, "
        f"{' '.join(f'{x:.2f}' for x in load_after)} after; "
        f"{figures['machine']['busy_cores_during_run']} cores busy on average during the run (all users)"
    )
    print(f"\n{'rule':<30} {'jobs':>5} {'seconds':>8} {'longest':>8}")
    for name, r in rules.items():
        print(f"{name:<30} {r['jobs']:>5} {r['seconds']:>8.0f} {r['longest']:>8.0f}")
    if args.json:
        args.json.write_text(json.dumps({**figures, "job_list": jobs}, indent=2))
    if args.keep:
        print(f"\nkept: {work}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

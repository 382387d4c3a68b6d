#!/usr/bin/env bash
# Rehearse the paper DAG through a real SLURM cluster with the project's profiles, and check from files that
# every job went through sbatch.
#
#   bash scripts/ci_slurm.sh                 # root, Debian 12; after scripts/setup.sh
#
# * Cluster: reuses a running one (e.g. brought up by the caller for the `slurm` pytest tests);
#   otherwise starts a one-node cluster with a fake GPU and 4 CPUs announced (scripts/local_slurm_up.sh: apt
#   slurm-wlm + munge; SLURM_CPUS overrides)
#   and stops it again on exit (by pidfile, trap).
# * Workflow: a copy of the working tree in a temporary folder (the checkout's results/ stay untouched),
#   under `timeout -s KILL` so that a hung executor cannot stall CI.
#   - default, the rehearsal (what .ci/run runs): `snakemake --profile slurm --profile profiles/rehearsal` =
#     config/paper.yaml with config/rehearsal.yaml over it: the whole paper DAG (every stage, run, variant,
#     benchmark, table and the report; DHRCL seed 0 only) on CPU with the tiny model; skeleton_rl (nnodes 2) is
#     one job with 2 SLURM tasks, each a Ray node that one of verl's 2 training workers runs on
#     (cluster.rehearsal_tasks_as_nodes); skin_rl_train's first job is cancelled once. docs/cluster.md.
#   - a slice: CI_SLURM_TARGETS set: `snakemake --profile slurm --profile profiles/ci <targets>` (config.yaml),
#     or with CI_SLURM_PROFILE=profiles/rehearsal a slice of the rehearsal.
# * Checks (from files): the last SLURM job of every Snakemake job has the executor's log
#   .snakemake/slurm_logs/rule_<rule>/.../<jobid>.log, written by SLURM, in which the job-side Snakemake
#   finished that rule (earlier attempts of a retried job must not have finished); the expected rules were
#   among them; the targets exist. The rehearsal expects every rule of its plan except the Snakefile's
#   localrules; skeleton_rl's ray_rehearsal.json showing 2 Ray nodes (SLURM tasks) in the job that
#   skeleton_rl_train was submitted as, with verl's 2 training workers one on each; and the cancelled
#   skin_rl_train job retried to the end.
#
# Environment (all optional):
#   CI_SLURM_TARGETS    targets of a slice (default: none, the rehearsal's whole DAG)
#   CI_SLURM_RULES      rules that must have run as SLURM jobs (default: the rehearsal's plan minus localrules;
#                       for a slice: data_ingest data_parquet tiny_model sft_train skeleton_rl_train)
#   CI_SLURM_PROFILE    the layer over profiles/slurm (default profiles/rehearsal; profiles/ci for a slice)
#   CI_SLURM_TIMEOUT_S  hard limit for the Snakemake run (default 2400)
#   CI_SLURM_CANCEL_ONCE  rule whose first SLURM job is cancelled while it runs, to rehearse the retry
#                       (default: skin_rl_train for the rehearsal, none for a slice; empty: none)
#   CI_SLURM_WORKDIR    where to copy the workflow (default: a new folder under /tmp; kept for inspection)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
TARGETS="${CI_SLURM_TARGETS:-}"
if [ -n "$TARGETS" ]; then
  MODE=slice
  LAYER="${CI_SLURM_PROFILE:-profiles/ci}"
  RULES="${CI_SLURM_RULES:-data_ingest data_parquet tiny_model sft_train skeleton_rl_train}"
else
  MODE=rehearsal
  LAYER="${CI_SLURM_PROFILE:-profiles/rehearsal}"
  RULES="${CI_SLURM_RULES:-}"   # filled from the rehearsal's plan below
fi
LIMIT_S="${CI_SLURM_TIMEOUT_S:-2400}"
# the rehearsal cancels skin_rl_train's first job once (the retry path); a slice only when asked
if [ "$MODE" = rehearsal ]; then CANCEL_RULE="${CI_SLURM_CANCEL_ONCE-skin_rl_train}"; else CANCEL_RULE="${CI_SLURM_CANCEL_ONCE:-}"; fi
WORK="${CI_SLURM_WORKDIR:-$(mktemp -d /tmp/codegrpo-ci-slurm.XXXXXX)}"
PY="$ROOT/.venv/bin/python"
SNAKEMAKE="$ROOT/.venv/bin/snakemake"
log() { echo "[ci_slurm] $*"; }

cluster_ready() { sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated|completing)'; }

started=0
if cluster_ready; then
  log "using the running Slurm cluster"
else
  log "starting a one-node Slurm cluster (fake GPU)"
  SLURM_FAKE_GPUS="${SLURM_FAKE_GPUS:-1}" SLURM_CPUS="${SLURM_CPUS:-4}" bash scripts/local_slurm_up.sh up
  started=1
fi
cleanup() {
  local rc=$?
  if [ "$started" = 1 ]; then bash scripts/local_slurm_up.sh down || true; fi
  exit "$rc"
}
trap cleanup EXIT
sinfo

# The fake GPU is schedulable (what GPU rules of the paper profile ask for).
gpus=$(sinfo -h -N -o %G | head -1)
if [[ "$gpus" == *gpu* ]]; then
  cvd=$(timeout -s KILL 120 srun -t 1 --gpus=1 printenv CUDA_VISIBLE_DEVICES)
  [ -n "$cvd" ] || { log "FAIL: a --gpus=1 job got no CUDA_VISIBLE_DEVICES"; exit 1; }
  log "GPU job scheduled on gres $gpus (CUDA_VISIBLE_DEVICES=$cvd)"
fi

log "copying the workflow to $WORK"
mkdir -p "$WORK"
git ls-files -co --exclude-standard | grep -v '^tests/' | tar -cf - -T - | tar -xf - -C "$WORK"
# Psyche-C (data_generate) as scripts/setup.sh built it, without copying it
if [ -e "$ROOT/build/psychec" ]; then
  mkdir -p "$WORK/build" && ln -sfn "$(readlink -f "$ROOT/build/psychec")" "$WORK/build/psychec"
fi
cd "$WORK"
export PATH="$ROOT/.venv/bin:$PATH"
# no internet needed: every input of the rehearsal is a shipped file
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

log "paper-scale DAG under the SLURM profile (dry run)"
timeout -s KILL 300 "$SNAKEMAKE" --profile slurm -n --quiet rules > dryrun.out 2>&1 \
  || { tail -n 40 dryrun.out; log "FAIL: snakemake --profile slurm -n"; exit 1; }

run_targets="$TARGETS"
if [ "$MODE" = rehearsal ]; then
  log "rehearsal plan (dry run)"
  timeout -s KILL 300 "$SNAKEMAKE" --profile slurm --profile "$LAYER" -n --quiet rules > plan.out 2>&1 \
    || { tail -n 40 plan.out; log "FAIL: snakemake --profile slurm --profile $LAYER -n"; exit 1; }
  [ -n "$RULES" ] || RULES=$("$PY" "$ROOT/scripts/ci_slurm_rules.py" Snakefile plan.out)
  TARGETS="results/tables ./report.html"   # checked after the run (the report is written locally from it)
  log "rules expected as SLURM jobs: $RULES"
fi

# The retry path: the first SLURM job of rule $CANCEL_RULE is cancelled once it runs (as a preemption would);
# Snakemake must submit it again (the profile's retries) and the run must still finish.
cancel_once() {
  local id
  while :; do
    id=$(squeue -h -o "%i %T %k" 2>/dev/null | awk -v r="rule_$1" '$2 == "RUNNING" && index($3, r) == 1 {print $1; exit}')
    if [ -n "$id" ]; then
      scancel "$id" && echo "$id" >> cancelled.txt && log "cancelled SLURM job $id ($1) while it ran: Snakemake must retry it"
      return 0
    fi
    sleep 1
  done
}
rm -f cancelled.txt
watcher=
if [ -n "$CANCEL_RULE" ]; then cancel_once "$CANCEL_RULE" & watcher=$!; fi

log "snakemake --profile slurm --profile $LAYER $run_targets  (limit ${LIMIT_S}s; load $(cut -d' ' -f1-3 /proc/loadavg))"
t0=$(date +%s)
set +e
timeout -s KILL "$LIMIT_S" "$SNAKEMAKE" --profile slurm --profile "$LAYER" $run_targets > snakemake.out 2>&1
rc=$?
set -e
[ -n "$watcher" ] && kill "$watcher" 2>/dev/null || true
tail -n 25 snakemake.out
if [ "$rc" != 0 ]; then
  [ "$rc" = 137 ] && log "FAIL: Snakemake killed after ${LIMIT_S}s"
  # cancel what this run submitted (a killed Snakemake cannot)
  ids=$(sed -n 's/.*submitted with SLURM jobid \([0-9]*\).*/\1/p' snakemake.out | tr '\n' ' ')
  [ -n "$ids" ] && scancel $ids 2>/dev/null || true
  log "FAIL: Snakemake exited $rc (full output: $WORK/snakemake.out; job logs: $WORK/.snakemake/slurm_logs)"
  for f in $(ls -t .snakemake/slurm_logs/*/*.log .snakemake/slurm_logs/*/*/*.log 2>/dev/null | head -3); do
    echo "---- $f"; tail -n 30 "$f"
  done
  exit 1
fi
log "Snakemake finished in $(( $(date +%s) - t0 ))s (load $(cut -d' ' -f1-3 /proc/loadavg))"
if [ "$MODE" = rehearsal ]; then
  timeout -s KILL 300 "$SNAKEMAKE" --profile slurm --profile "$LAYER" --report report.html > report.out 2>&1 \
    || { tail -n 30 report.out; log "FAIL: snakemake --report"; exit 1; }
  ls results/tables/*.csv > /dev/null || { log "FAIL: no paper table in results/tables"; exit 1; }
fi

# Evidence that the jobs went through sbatch, from files only.
MODE="$MODE" LAYER="$LAYER" CANCEL_RULE="$CANCEL_RULE" "$PY" - "$RULES" $TARGETS <<'EOF'
import json
import os
import re
import sys
from pathlib import Path

rules_expected = sys.argv[1].split()
targets = [t for t in sys.argv[2:] if "/" in t]
out = Path("snakemake.out").read_text()
subs = re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: ([^)]+)\)", out)
assert subs, "no job was submitted to SLURM"
cancelled = set(Path("cancelled.txt").read_text().split()) if Path("cancelled.txt").exists() else set()
attempts = {}  # Snakemake job -> its SLURM jobs in order (a retry is submitted again under the same number)
for sm_job, job_id, log_path in subs:
    attempts.setdefault(sm_job, []).append((job_id, log_path))
ran, retried = {}, {}
for sm_job, tries in attempts.items():
    for i, (job_id, log_path) in enumerate(tries):
        log = Path(log_path)
        assert ".snakemake/slurm_logs/rule_" in log_path, log_path
        rule = log_path.split("rule_", 1)[1].split("/", 1)[0]
        text = log.read_text(errors="replace") if log.is_file() else ""
        m = re.search(r"Finished jobid: \d+ \(Rule: (\w+)\)", text)
        if i < len(tries) - 1:  # an attempt that failed or was cancelled, then retried
            assert not m, f"job {job_id} ({rule}) finished but was submitted again"
            retried.setdefault(rule, []).append(job_id)
            continue
        assert log.is_file() and log.stem == job_id, f"job {job_id}: no SLURM log at {log}"
        assert m, f"job {job_id}: its log does not show the rule finishing inside the job:\n{text[-2000:]}"
        assert m.group(1) == rule, (job_id, rule, m.group(1))
        ran.setdefault(rule, []).append(job_id)
if os.environ["CANCEL_RULE"]:  # the job cancelled on purpose was submitted again and finished
    rule = os.environ["CANCEL_RULE"]
    assert cancelled, f"no {rule} job was cancelled: the retry path did not run"
    assert cancelled <= set(retried.get(rule, [])) and rule in ran, (cancelled, retried, sorted(ran))
missing = [r for r in rules_expected if r not in ran]
assert not missing, f"rules that did not run as SLURM jobs: {missing} (ran: {sorted(ran)})"
for t in targets:
    assert Path(t).exists(), f"target {t} missing"
if os.environ["MODE"] == "rehearsal" or (os.environ["LAYER"].rstrip("/").endswith("rehearsal")
                                         and "skeleton_rl_train" in ran):
    # skeleton_rl: one SLURM job whose 2 tasks were the 2 Ray nodes, a task ran on each
    ray = json.loads(Path("results/runs/skeleton_rl/ray_rehearsal.json").read_text())
    assert ray["job_id"] in ran.get("skeleton_rl_train", []), (ray["job_id"], ran.get("skeleton_rl_train"))
    assert ray["ray_nodes"] == 2 and len({t["node_id"] for t in ray["tasks"]}) == 2, ray
    # verl's training workers (world size 2) were placed on both Ray nodes, one per node
    workers = ray["training_workers"]["workers"]
    assert ray["training_nodes"] == 2 and len({w["node_id"] for w in workers}) == 2, ray
    assert {w["node_id"] for w in workers} == {t["node_id"] for t in ray["tasks"]}, ray
    print(f"[ci_slurm] OK: skeleton_rl_train = SLURM job {ray['job_id']}, {ray['ray_nodes']} tasks as Ray nodes, "
          f"training ranks {[w['rank'] for w in workers]} on {ray['training_nodes']} of them")
if retried:
    print("[ci_slurm] OK: retried to the end: " + ", ".join(f"{r} (SLURM jobs {v} failed or were cancelled)"
                                                         for r, v in sorted(retried.items())))
print(f"[ci_slurm] OK: {len(subs)} SLURM submissions, " +
      ", ".join(f"{r} x{len(v)}" for r, v in sorted(ran.items())))
EOF

"""codegrpo.cluster.probes on this host: the Ray processes left under a temp dir are found by its name (the
probes of a running cluster are exercised with one in tests/slurm/ and tests/verl/test_cpu.py)."""

from __future__ import annotations

import subprocess
import sys

from codegrpo import cluster


def test_leftover_pids_finds_processes_by_marker(tmp_path):
    marker = tmp_path / "unique-marker-dir"
    # The child says "ready" once it runs: only then is its /proc cmdline the program under test (right after
    # Popen it may still be the forked copy of this interpreter, before exec).
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)", str(marker)],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline() == b"ready\n"
        assert proc.pid in cluster.leftover_pids(marker)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert proc.pid not in cluster.leftover_pids(marker)

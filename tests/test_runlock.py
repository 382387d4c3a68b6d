"""The run-folder lock: a second trainer on the same run folder fails at once; a dead holder frees it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from codegrpo.runlock import RunLockedError, lock_path, run_dir_lock
from codegrpo.verl.stages import run_grpo, run_sft

HOLD = """
import sys
from codegrpo.runlock import run_dir_lock
with run_dir_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def holder(tmp_path):
    """A second process holding the lock of tmp_path/run until the test ends (its stdin closes)."""
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    yield run, proc
    proc.stdin.close()
    proc.wait(timeout=60)


def test_second_trainer_on_a_run_folder_fails_before_touching_it(holder):
    run, proc = holder
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    # the training entry points take the lock first: nothing of the run is read, moved or written
    for call in (
        lambda: run_grpo({}, {}, "x", train_files=[], val_files=[], init_model="m", run_dir=run),
        lambda: run_sft({}, "skeleton", train_files=[], val_files=[], init_model="m", run_dir=run),
    ):
        with pytest.raises(RunLockedError, match=r"in use by another trainer.*run\.lock") as info:
            call()
        assert f'"pid": {proc.pid}' in str(info.value)
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]
    assert json.loads(lock_path(run).read_text())["pid"] == proc.pid


def test_lock_is_free_once_its_holder_ends(holder):
    run, proc = holder
    with pytest.raises(RunLockedError):
        with run_dir_lock(run):
            pass
    proc.stdin.close()
    proc.wait(timeout=60)
    with run_dir_lock(run) as path:  # a retry after preemption: the dead holder's lock file is no obstacle
        assert json.loads(path.read_text())["pid"] != proc.pid

"""Evaluation without a private uid (issue 22, items 3 and 5): it fails closed unless
``evaluate.codegen.allow_shared_uid`` says otherwise, the numbers are then marked unguarded, and even then one
sample cannot shift another's verdict (a sample that kills its supervisor or writes a fake reply into its pipe
costs that sample a retry and then its score, never the batch).

Private uids are switched off while running as root, as in ``test_harness_forgery.py``'s
``test_shared_uid_sample_cannot_shift_later_replies`` (a stronger attacker: root also passes the non-dumpable
barrier of the runner and the supervisor).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from codegrpo import sandbox as ex
from codegrpo.eval import codegen as cg
from codegrpo.eval import suites as s
from codegrpo.sandbox import client

pytestmark = pytest.mark.hostile

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "codegen_samples"
LCB = {"timeout_s": 2, "task_timeout_s": 30}
EP = {"min_time_limit_s": 1.0, "task_timeout_s": 10}

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching private uids off needs a root supervisor")


@pytest.fixture(scope="module")
def problems():
    lcb = {
        p.problem_id: p
        for p in s.load_livecodebench(
            SAMPLES / "livecodebench", "v6", solutions=SAMPLES / "livecodebench-solutions.jsonl"
        )
    }
    he = {p.problem_id: p for p in s.load_evalplus("humaneval_plus", SAMPLES / "HumanEvalPlus-sample.jsonl")}
    return {"lcb": lcb["3900"], "evalplus": he["HumanEval/900"]}


def _shared_uid_sandbox(workers: int = 1) -> ex.Sandbox:
    sb = ex.Sandbox(ex.SandboxLimits(wall_s=30, cpu_s=30, memory_mb=2048, nproc=64, fsize_mb=8), workers=workers)
    for sup in sb._sups:
        sup.info = dataclasses.replace(sup.info, private_uid=False)
    sb.info = dataclasses.replace(sb.info, private_uid=False)
    return sb


# A fake supervisor reply (a passing suite verdict) written into every descriptor of the supervisor (the
# candidate's parent), and a candidate that kills its supervisor.
_FAKE = json.dumps(
    {
        "steps": [
            {
                "returncode": 0,
                "signal": None,
                "timed_out": False,
                "report": {
                    "done": True,
                    "verdict": {
                        "executed": True,
                        "status": "pass",
                        "n_pass": 99,
                        "n": 3,
                        "base": {"status": "pass", "n_pass": 9},
                        "plus": {"status": "pass", "n_pass": 9},
                    },
                },
            }
        ],
        "collected": {},
    }
)
PIPE_WRITER = (
    "import os as _os\n_pp = _os.getppid()\n"
    "for _fd in _os.listdir(f'/proc/{_pp}/fd'):\n    try:\n"
    f"        _os.write(_os.open(f'/proc/{{_pp}}/fd/{{_fd}}', _os.O_WRONLY), {_FAKE!r}.encode() + b'\\n')\n"
    "    except OSError:\n        pass\n"
)
KILLER = "import os as _os, signal as _sg\n_os.kill(_os.getppid(), _sg.SIGKILL)\n"


def _wrong(kind: str) -> str:
    if kind == "lcb":
        return "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 0]\n"
    return "def sum_squares(*args, **kwargs):\n    return 0\n"


def _score(kind, problem, code, sb):
    if kind == "lcb":
        return s.score_livecodebench(problem, code, 0, sb, 2, LCB)
    return s.score_evalplus(problem, code, 0, sb, 10, EP)


@needs_root
@pytest.mark.parametrize("kind", ["lcb", "evalplus"])
def test_suite_sample_cannot_shift_other_verdicts_without_private_uid(kind, problems):
    """Honest, wrong and hostile samples in one supervisor with a shared uid: the honest samples keep their
    verdicts, the hostile ones score 0 with ``supervisor_lost``, and the batch does not raise."""
    p = problems[kind]
    ref, wrong = p.reference, _wrong(kind)
    items = [ref, PIPE_WRITER + wrong, ref, wrong, KILLER + wrong, ref, wrong]
    sb = _shared_uid_sandbox()
    try:
        res = [_score(kind, p, code, sb) for code in items]
    finally:
        sb.close()
    assert [r.passed for r in res] == [True, False, True, False, False, True, False], res
    assert res[0].n_pass == res[2].n_pass == res[5].n_pass == res[0].n_test > 0
    assert res[3].n_pass == res[6].n_pass < res[3].n_test and res[3].hack is None
    for r in (res[1], res[4]):
        assert r.n_pass == 0 and r.hack == "supervisor_lost" and not r.exec_ok, r


@needs_root
def test_evaluation_fails_closed_without_private_uid(problems, monkeypatch):
    """``evaluate_samples`` refuses a sandbox without private uids (naming the key), and with
    ``allow_shared_uid`` scores but marks the result ``guarded: false`` (and the DHRCL table UNGUARDED)."""
    real = client.sandbox_info()
    monkeypatch.setattr(client, "sandbox_info", lambda: dataclasses.replace(real, private_uid=False))
    p = problems["lcb"]
    samples = {p.problem_id: [p.reference]}
    with pytest.raises(RuntimeError, match="allow_shared_uid"):
        cg.evaluate_samples("livecodebench", [p], samples, extract=False, suites={"livecodebench": LCB})
    res = cg.evaluate_samples(
        "livecodebench", [p], samples, extract=False, suites={"livecodebench": LCB, "allow_shared_uid": True}
    )
    assert res["guarded"] is False and "+uid" not in res["sandbox_mechanism"]
    assert res["pass@k"]["1"] == 100.0
    monkeypatch.setattr(client, "sandbox_info", lambda: real)
    guarded = cg.evaluate_samples("livecodebench", [p], samples, extract=False, suites={"livecodebench": LCB})
    assert guarded["guarded"] is True and "+uid" in guarded["sandbox_mechanism"]

    from codegrpo.tables import table_dhrcl

    def result(r):
        return {
            "kind": "codegen",
            "benchmark": "livecodebench",
            "system": "dhrcl-full-seed0",
            "label": "x",
            "variant": "full",
            "reconstructed": True,
            "provenance": {"config": {}, "date": "2026-12-05"},
            "_path": "results/eval/x/livecodebench.json",
            **{k: v for k, v in r.items() if k != "records"},
        }

    t = table_dhrcl([result(res)], {}, benchmarks=("livecodebench",))
    assert "UNGUARDED: livecodebench" in t.rows[0]["setting"] and any("UNGUARDED" in n for n in t.notes)
    t = table_dhrcl([result(guarded)], {}, benchmarks=("livecodebench",))
    assert "UNGUARDED" not in t.rows[0]["setting"] and not any("UNGUARDED" in n for n in t.notes)

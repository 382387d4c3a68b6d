"""DHRCL evaluation: pass@k estimator, code extraction, and sandboxed scoring on real HumanEval / KodCode data."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from codegrpo.eval import codegen as c


def _pass_at_k_bruteforce(n, cnt, k):
    """Probability that a random k-subset of n samples (cnt correct) contains a correct one, by enumeration."""
    samples = [True] * cnt + [False] * (n - cnt)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,cnt,k", [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (6, 0, 2), (6, 6, 4), (7, 3, 7)])
def test_pass_at_k_matches_enumeration(n, cnt, k):
    assert c.pass_at_k(n, cnt, k) == pytest.approx(_pass_at_k_bruteforce(n, cnt, k))


def test_pass_at_1_is_the_success_share():
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 20)
        cnt = rng.randint(0, n)
        assert c.pass_at_k(n, cnt, 1) == pytest.approx(cnt / n)
    with pytest.raises(ValueError):
        c.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        c.pass_at_k(3, 1, 4)


def test_aggregate_over_problems():
    rs = [
        c.SampleResult("a", 0, True, True, True, 2, 2),
        c.SampleResult("a", 1, True, False, False, 0, 2),
        c.SampleResult("b", 0, False, False, False, 0, 2),
        c.SampleResult("b", 1, True, True, False, 1, 2),
    ]
    agg = c.aggregate(rs, ks=(1, 2))
    assert agg["pass@k"]["1"] == pytest.approx(100 * (0.5 + 0.0) / 2)
    assert agg["pass@k"]["2"] == pytest.approx(100 * (1.0 + 0.0) / 2)
    assert agg["syntax_acc"] == 75.0 and agg["exec_acc"] == 50.0
    assert agg["test_pass_rate"] == pytest.approx(100 * (1 + 0 + 0 + 0.5) / 4)
    assert math.isclose(agg["n_problems"], 2)


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail():
    probs = c.load_humaneval(limit=12)
    assert len(probs) == 12 and all(p.entry_point for p in probs)
    ref = c.evaluate_samples("humaneval", probs, c.reference_samples(probs), workers=2, extract=False)
    assert ref["pass@k"]["1"] == 100.0 and ref["syntax_acc"] == 100.0 and ref["exec_acc"] == 100.0
    # n = 3 samples per problem: the canonical body in a fence (the model format), a wrong body, a syntax error
    samples = {}
    for p in probs:
        good = "```python\n" + p.reference + "\n```"
        wrong = f"```python\ndef {p.entry_point}(*args, **kwargs):\n    return None\n```"
        samples[p.problem_id] = [good, wrong, "```python\ndef broken(:\n```"]
    res = c.evaluate_samples("humaneval", probs, samples, ks=(1, 3), workers=2)
    assert res["pass@k"]["1"] == pytest.approx(100 / 3)
    assert res["pass@k"]["3"] == 100.0
    assert res["syntax_acc"] == pytest.approx(200 / 3)
    recs = {(r["problem_id"], r["sample"]): r for r in res["records"]}
    first = probs[0].problem_id
    assert recs[(first, 0)]["passed"] and not recs[(first, 1)]["passed"] and recs[(first, 1)]["exec_ok"]
    assert not recs[(first, 2)]["syntax_ok"] and not recs[(first, 2)]["exec_ok"]


def test_humaneval_program_keeps_prompt_imports():
    p = c.load_humaneval(limit=1)[0]  # has_close_elements uses typing.List
    body = "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n    return False\n"
    prog = c.humaneval_program(p, body)
    assert prog.startswith("from typing import List")
    # a body-only completion is appended to the prompt's header
    assert c.humaneval_program(p, "    return False\n").startswith(p.prefix)


def test_kodcode_reference_solutions_pass(kodcode_heldout, tmp_path):
    out = tmp_path / "ref.json"
    res = c.run_reference("kodcode_heldout", out, kodcode_heldout=kodcode_heldout, limit=10, workers=2)
    assert res["n_problems"] == 10
    assert res["pass@k"]["1"] == 100.0 and res["exec_acc"] == 100.0
    saved = json.loads(out.read_text())
    assert saved["kind"] == "codegen" and saved["system"] == "reference"
    assert {"model", "config_hash", "date"} <= set(saved["provenance"])


def test_kodcode_failing_and_crashing_solutions(kodcode_heldout):
    probs = c.load_kodcode_heldout(kodcode_heldout, limit=4)
    samples = {
        p.problem_id: ["```python\nraise RuntimeError('boom')\n```", "```python\nimport sys\n```"] for p in probs
    }
    res = c.evaluate_samples("kodcode_heldout", probs, samples, workers=2)
    assert res["pass@k"]["1"] == 0.0
    by = {r["sample"]: r for r in res["records"] if r["problem_id"] == probs[0].problem_id}
    assert not by[0]["exec_ok"] and by[0]["syntax_ok"]
    assert by[1]["exec_ok"] and not by[1]["passed"]

"""The paper's code-generation suites (HumanEval+, MBPP+, BigCodeBench, LiveCodeBench): loaders on files written
here in each benchmark's published schema, harnesses run for real in the sandbox against the benchmark's own
ground truth (canonical / reference solutions pass, wrong ones fail)."""

from __future__ import annotations

import base64
import gzip
import json
import pickle
import zlib
from pathlib import Path

import pytest

from codegrpo.eval import codegen as c
from codegrpo.eval import suites as s

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "data" / "codegen_samples"

# --------------------------------------------------------------------------------------------------------
# Records in the published schemas (project-written tasks; data/codegen_samples/ ships the same records)

HE_PLUS = [
    {"task_id": "HumanEval/900", "entry_point": "sum_squares",
     "prompt": "from typing import List\n\n\ndef sum_squares(xs: List[int]) -> int:\n"
               "    \"\"\"Return the sum of the squares of xs.\n    >>> sum_squares([1, 2])\n    5\n    \"\"\"\n",
     "canonical_solution": "    return sum(x * x for x in xs)\n",
     "contract": "\n    assert isinstance(xs, list)\n",
     "base_input": [[[1, 2, 3]], [[0]]], "plus_input": [[[]], [[-4, 10 ** 6]], [list(range(50))]], "atol": 0,
     "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate([1, 2, 3]) == 14\n"
             "    assert candidate([0]) == 0\n"},
    {"task_id": "HumanEval/901", "entry_point": "mean",
     "prompt": "def mean(xs: list) -> float:\n    \"\"\"Arithmetic mean of a non-empty list of numbers.\"\"\"\n",
     "canonical_solution": "    return sum(xs) / len(xs)\n", "contract": "",
     "base_input": [[[1.0, 2.0]], [[0.1, 0.2, 0.3]]], "plus_input": [[[1e-9, 3.5, -2.25]], [[7.0]]], "atol": 0,
     "test": "\n\ndef check(candidate):\n    assert abs(candidate([1.0, 2.0]) - 1.5) < 1e-6\n"},
    {"task_id": "HumanEval/932", "entry_point": "find_zero",
     "prompt": "import math\n\n\ndef poly(xs: list, x: float):\n    return sum([coeff * math.pow(x, i) for i, coeff "
               "in enumerate(xs)])\n\n\ndef find_zero(xs: list):\n    \"\"\"A zero of the polynomial with "
               "coefficients xs (odd degree).\"\"\"\n",
     "canonical_solution": "    lo, hi = -1.0, 1.0\n    while poly(xs, lo) * poly(xs, hi) > 0:\n        lo *= 2.0\n"
                           "        hi *= 2.0\n    while hi - lo > 1e-10:\n        mid = (lo + hi) / 2.0\n"
                           "        if poly(xs, mid) * poly(xs, lo) > 0:\n            lo = mid\n        else:\n"
                           "            hi = mid\n    return lo\n",
     "contract": "", "base_input": [[[1, 2]], [[-6, 11, -6, 1]]], "plus_input": [[[3, -4, 0, 2]]], "atol": 1e-6,
     "test": "\n\ndef check(candidate):\n    assert abs(poly([1, 2], candidate([1, 2]))) < 1e-6\n"},
]

MBPP_PLUS = [
    {"task_id": "Mbpp/2", "entry_point": "similar_elements",
     "prompt": "\"\"\"\nWrite a function to find the shared elements from the given two lists.\n"
               "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n\"\"\"\n",
     "canonical_solution": "\ndef similar_elements(test_tup1, test_tup2):\n"
                           "  assert isinstance(test_tup1, tuple) and isinstance(test_tup2, tuple)\n"
                           "  return tuple(set(test_tup1) & set(test_tup2))\n",
     "base_input": [[[3, 4, 5, 6], [5, 7, 4, 10]], [[1, 2, 3, 4], [5, 4, 3, 7]]],
     "plus_input": [[[], [1]], [[11, 12, 14, 13], [17, 15, 14, 13]]], "atol": 0,
     "test": "import numpy as np\n\ninputs = [((3, 4, 5, 6), (5, 7, 4, 10))]\nresults = [(4, 5)]\n",
     "assertion": "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))"},
    {"task_id": "Mbpp/903", "entry_point": "count_vowels",
     "prompt": "\"\"\"\nWrite a python function to count the vowels (a, e, i, o, u, either case) in a string.\n"
               "assert count_vowels('Hello') == 2\n\"\"\"\n",
     "canonical_solution": "\ndef count_vowels(s):\n  return sum(ch in 'aeiouAEIOU' for ch in s)\n",
     "base_input": [["Hello"], ["xyz"]], "plus_input": [[""], ["AEIOUaeiou" * 30]], "atol": 0,
     "test": "\ninputs = [['Hello']]\nresults = [2]\n", "assertion": "assert count_vowels('Hello') == 2"},
]


def write_jsonl(path: Path, records, gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _fence(code: str) -> str:
    return "Here it is.\n```python\n" + code + "\n```"


# --------------------------------------------------------------------------------------------------------
# EvalPlus


def test_humaneval_plus_canonical_passes_and_wrong_programs_fail(tmp_path):
    path = write_jsonl(tmp_path / "HumanEvalPlus-v0.1.10.jsonl.gz", HE_PLUS, gz=True)
    probs = s.load_evalplus("humaneval_plus", path)
    assert [p.problem_id for p in probs] == [r["task_id"] for r in HE_PLUS]
    ref = c.evaluate_samples("humaneval_plus", probs, c.reference_samples(probs), extract=False, workers=2)
    assert ref["pass@k"]["1"] == 100.0 and ref["base_pass@k"]["1"] == 100.0 and ref["exec_acc"] == 100.0
    other_root = ("def find_zero(xs):\n    lo, hi = -1e3, 1e3\n    for _ in range(200):\n        mid = (lo + hi) / 2\n"
                  "        if poly(xs, lo) * poly(xs, mid) <= 0:\n            hi = mid\n        else:\n"
                  "            lo = mid\n    return hi\n")
    samples = {
        # base passes (non-empty lists), plus fails on [] (an exception)
        "HumanEval/900": [_fence("def sum_squares(xs):\n    return max(xs) * 0 + sum(x * x for x in xs)\n"),
                          _fence("def sum_squares(xs):\n    return None\n")],
        # the same mean summed in another order: equal within EvalPlus's float tolerance
        "HumanEval/901": [_fence("def mean(xs):\n    return sum(reversed(xs)) / len(xs)\n"),
                          _fence("def mean(xs):\n    return sum(xs) / len(xs) + 1e-3\n")],
        # the special oracle accepts any zero (|poly| <= atol), not only the canonical one
        "HumanEval/932": [_fence(other_root), _fence("def find_zero(xs):\n    while True:\n        pass\n")],
    }
    res = c.evaluate_samples("humaneval_plus", probs, samples, ks=(1, 2), workers=2,
                             suites={"evalplus": {"min_time_limit_s": 0.5, "task_timeout_s": 3}})
    rec = {(r["problem_id"], r["sample"]): r for r in res["records"]}
    assert rec[("HumanEval/900", 0)]["passed_base"] and not rec[("HumanEval/900", 0)]["passed"]
    assert "plus" in rec[("HumanEval/900", 0)]["detail"]
    assert not rec[("HumanEval/900", 1)]["passed_base"] and rec[("HumanEval/900", 1)]["exec_ok"]
    assert rec[("HumanEval/901", 0)]["passed"] and not rec[("HumanEval/901", 1)]["passed_base"]
    assert rec[("HumanEval/932", 0)]["passed"]
    assert not rec[("HumanEval/932", 1)]["passed"] and "timeout" in rec[("HumanEval/932", 1)]["detail"]
    assert res["base_pass@k"]["1"] == pytest.approx(100 * (0.5 + 0.5 + 0.5) / 3)
    assert res["pass@k"]["1"] == pytest.approx(100 * (0 + 0.5 + 0.5) / 3)


def test_mbpp_plus_restores_tuples_and_compares_sets(tmp_path):
    path = write_jsonl(tmp_path / "MbppPlus-v0.2.0.jsonl", MBPP_PLUS)
    probs = s.load_evalplus("mbpp_plus", path)
    assert probs[0].extra["inputs"]["base"][0] == [(3, 4, 5, 6), (5, 7, 4, 10)]  # task 2 takes tuples
    assert "shared elements" in probs[0].prompt and "similar_elements" in probs[0].prompt
    ref = c.evaluate_samples("mbpp_plus", probs, c.reference_samples(probs), extract=False)
    assert ref["pass@k"]["1"] == 100.0, ref["records"]
    samples = {"Mbpp/2": [_fence("def similar_elements(a, b):\n    return tuple(sorted(set(b) & set(a), reverse=True))"),
                          _fence("def similar_elements(a, b):\n    return a")],
               "Mbpp/903": [_fence("def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)"),
                            _fence("def count_vowels(s):\n    return len([c for c in s.lower() if c in 'aeiou'])")]}
    res = c.evaluate_samples("mbpp_plus", probs, samples, ks=(1,))
    rec = {(r["problem_id"], r["sample"]): r["passed"] for r in res["records"]}
    assert rec == {("Mbpp/2", 0): True, ("Mbpp/2", 1): False, ("Mbpp/903", 0): False, ("Mbpp/903", 1): True}


def test_mbpp_plus_input_restoration_follows_evalplus():
    assert s.mbpp_plus_inputs("Mbpp/124", [[1, "1+2j"]]) == [(1.0, 1 + 2j)]
    assert s.mbpp_plus_inputs("Mbpp/115", [[[[1], []]]]) == [[[{1}, {}]]]
    assert s.mbpp_plus_inputs("Mbpp/580", [[[1, [2, 3]], 4]]) == [((1, (2, 3)), 4)]
    assert s.mbpp_plus_inputs("Mbpp/722", [[{"a": [1, 2]}, 3]]) == [[{"a": (1, 2)}, 3]]
    assert s.mbpp_plus_inputs("Mbpp/3", [[7]]) == [[7]]


def test_evalplus_schema_errors_name_file_line_and_field(tmp_path):
    bad = dict(HE_PLUS[0])
    del bad["plus_input"]
    path = write_jsonl(tmp_path / "HumanEvalPlus-bad.jsonl", [HE_PLUS[1], bad])
    with pytest.raises(s.BenchmarkDataError, match=r"HumanEvalPlus-bad\.jsonl: line 2: field 'plus_input' is missing"):
        s.load_evalplus("humaneval_plus", path)
    no_assert = dict(MBPP_PLUS[0])
    del no_assert["assertion"]
    path = write_jsonl(tmp_path / "MbppPlus-bad.jsonl", [no_assert])
    with pytest.raises(s.BenchmarkDataError, match=r"line 1: field 'assertion' is missing"):
        s.load_evalplus("mbpp_plus", path)
    (tmp_path / "broken.jsonl").write_text(json.dumps(HE_PLUS[0]) + "\n{not json\n")
    with pytest.raises(s.BenchmarkDataError, match=r"broken\.jsonl: line 2: not valid JSON"):
        s.load_evalplus("humaneval_plus", tmp_path / "broken.jsonl")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        s.load_evalplus("humaneval_plus", tmp_path / "nope.jsonl")


def test_broken_canonical_solution_is_an_error_naming_the_task(tmp_path):
    bad = dict(HE_PLUS[0], canonical_solution="    return 1 / 0\n")
    probs = s.load_evalplus("humaneval_plus", write_jsonl(tmp_path / "he.jsonl", [bad]))
    with pytest.raises(RuntimeError, match=r"he\.jsonl:1: task HumanEval/900: expected outputs not computed.*"
                                           r"ZeroDivisionError"):
        c.evaluate_samples("humaneval_plus", probs, c.reference_samples(probs), extract=False)

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

from codegrpo.hub import HubError

from codegrpo.eval import codegen as c
from codegrpo.eval import suites as s

from tests.conftest import REPO_ROOT as REPO

SAMPLES = REPO / "data" / "codegen_samples"

# --------------------------------------------------------------------------------------------------------
# Records in the published schemas (project-written tasks; data/codegen_samples/ ships the same records)

HE_PLUS = [
    {
        "task_id": "HumanEval/900",
        "entry_point": "sum_squares",
        "prompt": "from typing import List\n\n\ndef sum_squares(xs: List[int]) -> int:\n"
        '    """Return the sum of the squares of xs.\n    >>> sum_squares([1, 2])\n    5\n    """\n',
        "canonical_solution": "    return sum(x * x for x in xs)\n",
        "contract": "\n    assert isinstance(xs, list)\n",
        "base_input": [[[1, 2, 3]], [[0]]],
        "plus_input": [[[]], [[-4, 10**6]], [list(range(50))]],
        "atol": 0,
        "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate([1, 2, 3]) == 14\n"
        "    assert candidate([0]) == 0\n",
    },
    {
        "task_id": "HumanEval/901",
        "entry_point": "mean",
        "prompt": 'def mean(xs: list) -> float:\n    """Arithmetic mean of a non-empty list of numbers."""\n',
        "canonical_solution": "    return sum(xs) / len(xs)\n",
        "contract": "",
        "base_input": [[[1.0, 2.0]], [[0.1, 0.2, 0.3]]],
        "plus_input": [[[1e-9, 3.5, -2.25]], [[7.0]]],
        "atol": 0,
        "test": "\n\ndef check(candidate):\n    assert abs(candidate([1.0, 2.0]) - 1.5) < 1e-6\n",
    },
    {
        "task_id": "HumanEval/932",
        "entry_point": "find_zero",
        "prompt": "import math\n\n\ndef poly(xs: list, x: float):\n    return sum([coeff * math.pow(x, i) for i, coeff "
        'in enumerate(xs)])\n\n\ndef find_zero(xs: list):\n    """A zero of the polynomial with '
        'coefficients xs (odd degree)."""\n',
        "canonical_solution": "    lo, hi = -1.0, 1.0\n    while poly(xs, lo) * poly(xs, hi) > 0:\n        lo *= 2.0\n"
        "        hi *= 2.0\n    while hi - lo > 1e-10:\n        mid = (lo + hi) / 2.0\n"
        "        if poly(xs, mid) * poly(xs, lo) > 0:\n            lo = mid\n        else:\n"
        "            hi = mid\n    return lo\n",
        "contract": "",
        "base_input": [[[1, 2]], [[-6, 11, -6, 1]]],
        "plus_input": [[[3, -4, 0, 2]]],
        "atol": 1e-6,
        "test": "\n\ndef check(candidate):\n    assert abs(poly([1, 2], candidate([1, 2]))) < 1e-6\n",
    },
]

MBPP_PLUS = [
    {
        "task_id": "Mbpp/2",
        "entry_point": "similar_elements",
        "prompt": '"""\nWrite a function to find the shared elements from the given two lists.\n'
        'assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n"""\n',
        "canonical_solution": "\ndef similar_elements(test_tup1, test_tup2):\n"
        "  assert isinstance(test_tup1, tuple) and isinstance(test_tup2, tuple)\n"
        "  return tuple(set(test_tup1) & set(test_tup2))\n",
        "base_input": [[[3, 4, 5, 6], [5, 7, 4, 10]], [[1, 2, 3, 4], [5, 4, 3, 7]]],
        "plus_input": [[[], [1]], [[11, 12, 14, 13], [17, 15, 14, 13]]],
        "atol": 0,
        "test": "import numpy as np\n\ninputs = [((3, 4, 5, 6), (5, 7, 4, 10))]\nresults = [(4, 5)]\n",
        "assertion": "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
    },
    {
        "task_id": "Mbpp/903",
        "entry_point": "count_vowels",
        "prompt": '"""\nWrite a python function to count the vowels (a, e, i, o, u, either case) in a string.\n'
        'assert count_vowels(\'Hello\') == 2\n"""\n',
        "canonical_solution": "\ndef count_vowels(s):\n  return sum(ch in 'aeiouAEIOU' for ch in s)\n",
        "base_input": [["Hello"], ["xyz"]],
        "plus_input": [[""], ["AEIOUaeiou" * 30]],
        "atol": 0,
        "test": "\ninputs = [['Hello']]\nresults = [2]\n",
        "assertion": "assert count_vowels('Hello') == 2",
    },
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
    other_root = (
        "def find_zero(xs):\n    lo, hi = -1e3, 1e3\n    for _ in range(200):\n        mid = (lo + hi) / 2\n"
        "        if poly(xs, lo) * poly(xs, mid) <= 0:\n            hi = mid\n        else:\n"
        "            lo = mid\n    return hi\n"
    )
    samples = {
        # base passes (non-empty lists), plus fails on [] (an exception)
        "HumanEval/900": [
            _fence("def sum_squares(xs):\n    return max(xs) * 0 + sum(x * x for x in xs)\n"),
            _fence("def sum_squares(xs):\n    return None\n"),
        ],
        # the same mean summed in another order: equal within EvalPlus's float tolerance
        "HumanEval/901": [
            _fence("def mean(xs):\n    return sum(reversed(xs)) / len(xs)\n"),
            _fence("def mean(xs):\n    return sum(xs) / len(xs) + 1e-3\n"),
        ],
        # the special oracle accepts any zero (|poly| <= atol), not only the canonical one
        "HumanEval/932": [_fence(other_root), _fence("def find_zero(xs):\n    while True:\n        pass\n")],
    }
    res = c.evaluate_samples(
        "humaneval_plus",
        probs,
        samples,
        ks=(1, 2),
        workers=2,
        suites={"evalplus": {"min_time_limit_s": 0.5, "task_timeout_s": 3}},
    )
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
    samples = {
        "Mbpp/2": [
            _fence("def similar_elements(a, b):\n    return tuple(sorted(set(b) & set(a), reverse=True))"),
            _fence("def similar_elements(a, b):\n    return a"),
        ],
        "Mbpp/903": [
            _fence("def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)"),
            _fence("def count_vowels(s):\n    return len([c for c in s.lower() if c in 'aeiou'])"),
        ],
    }
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
    no_test = {k: v for k, v in MBPP_PLUS[1].items() if k != "test"}  # not every MBPP+ release carries `test`
    assert s.load_evalplus("mbpp_plus", write_jsonl(tmp_path / "MbppPlus-notest.jsonl", [no_test]))[0].entry_point
    (tmp_path / "broken.jsonl").write_text(json.dumps(HE_PLUS[0]) + "\n{not json\n")
    with pytest.raises(s.BenchmarkDataError, match=r"broken\.jsonl: line 2: not valid JSON"):
        s.load_evalplus("humaneval_plus", tmp_path / "broken.jsonl")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        s.load_evalplus("humaneval_plus", tmp_path / "nope.jsonl")


def test_broken_canonical_solution_is_an_error_naming_the_task(tmp_path):
    bad = dict(HE_PLUS[0], canonical_solution="    return 1 / 0\n")
    probs = s.load_evalplus("humaneval_plus", write_jsonl(tmp_path / "he.jsonl", [bad]))
    with pytest.raises(
        RuntimeError,
        match=r"he\.jsonl:1: task HumanEval/900: expected outputs not computed.*"
        r"ZeroDivisionError",
    ):
        c.evaluate_samples("humaneval_plus", probs, c.reference_samples(probs), extract=False)


# --------------------------------------------------------------------------------------------------------
# LiveCodeBench


def lcb_private(tests) -> str:
    """LiveCodeBench's compressed private tests: base64(zlib(pickle(JSON string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def _lcb_record(qid, title, content, date, starter, public, private, func_name=None, platform="atcoder", compress=True):
    return {
        "question_title": title,
        "question_content": content,
        "platform": platform,
        "question_id": qid,
        "contest_id": "c" + qid,
        "contest_date": date,
        "starter_code": starter,
        "difficulty": "easy",
        "public_test_cases": json.dumps(public),
        "private_test_cases": lcb_private(private) if compress else json.dumps(private),
        "metadata": json.dumps({"func_name": func_name} if func_name else {}),
    }


def _stdin(i, o):
    return {"input": i, "output": o, "testtype": "stdin"}


def _fn(i, o):
    return {"input": i, "output": o, "testtype": "functional"}


LCB = [
    _lcb_record(
        "abc900_a",
        "Sum of a list",
        "Read N, then N integers; print their sum and their mean.",
        "2025-02-01T00:00:00",
        "",
        [_stdin("3\n1 2 3\n", "6\n2.0\n")],
        [_stdin("1\n-5\n", "-5\n-5.0\n"), _stdin("4\n1 1 1 2\n", "5\n1.25\n")],
    ),
    _lcb_record(
        "3900",
        "two-sum-count",
        "Given nums and target, return the indices [i, j] (i < j) whose values sum to target.",
        "2025-03-02T00:00:00",
        "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
        [_fn("[2, 7, 11, 15]\n9", "[0, 1]")],
        [_fn("[3, 2, 4]\n6", "[1, 2]"), _fn("[3, 3]\n6", "[0, 1]")],
        func_name="twoSum",
        platform="leetcode",
        compress=False,
    ),
    _lcb_record(
        "abc700_a", "Old problem", "Print 1.", "2024-01-05T00:00:00", "", [_stdin("", "1\n")], [_stdin("", "1\n")]
    ),
]

LCB_SOLUTIONS = [
    {
        "question_id": "abc900_a",
        "code": "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs))\nprint(sum(xs) / n)\n",
    },
    {
        "question_id": "3900",
        "code": "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
        "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return (seen[target - x], i)\n            seen[x] = i\n",
    },
    {"question_id": "abc700_a", "code": "print(1)\n"},
]


def test_livecodebench_loads_compressed_tests_and_date_window(tmp_path):
    folder = tmp_path / "lcb"
    folder.mkdir()
    write_jsonl(folder / "test.jsonl", LCB[2:])
    write_jsonl(folder / "test6.jsonl", LCB[:2])
    for i in range(2, 6):
        write_jsonl(folder / f"test{i}.jsonl", [])
    assert s.lcb_files("release_v6") == ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]
    assert s.lcb_files("v6") == ["test6.jsonl"]
    every = s.load_livecodebench(folder, "release_v6")
    assert [p.problem_id for p in every] == ["abc700_a", "abc900_a", "3900"]
    window = s.load_livecodebench(folder, "release_v6", start_date="2025-01-01", end_date="2025-12-31")
    assert [p.problem_id for p in window] == ["abc900_a", "3900"]
    assert len(window[0].extra["lcb_tests"]) == 3 and window[1].extra["fn_name"] == "twoSum"
    assert "Starter code" in window[1].prompt and "method twoSum" in window[1].prompt
    assert "standard input" in window[0].prompt and "```python" in window[0].prompt
    with pytest.raises(s.BenchmarkDataError, match="no problems in the date window"):
        s.load_livecodebench(folder, "v6", start_date="2026-01-01")


def test_livecodebench_reference_programs_pass_and_wrong_ones_fail(tmp_path):
    data = write_jsonl(tmp_path / "test6.jsonl", LCB)
    sols = write_jsonl(tmp_path / "solutions.jsonl", LCB_SOLUTIONS)
    probs = s.load_livecodebench(data, "v6", solutions=sols)
    ref = c.evaluate_samples("livecodebench", probs, c.reference_samples(probs), extract=False, workers=2)
    assert ref["pass@k"]["1"] == 100.0, ref["records"]
    samples = {
        # mean printed as 2 instead of 2.0: equal as decimals (LiveCodeBench's element-wise comparison)
        "abc900_a": [
            _fence(
                "import sys\nd = sys.stdin.read().split()\nn = int(d[0]); xs = list(map(int, d[1:]))\n"
                "print(sum(xs)); print(f'{sum(xs) / n:.4f}')"
            ),
            _fence("n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs))"),
            _fence("print(undefined_name)"),
        ],
        "3900": [
            _fence("class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]"),
            _fence("class Solution:\n    def twoSum(self, nums, target):\n        while True:\n            pass"),
        ],
        "abc700_a": [_fence("print(' 1 ')"), _fence("print(2)")],
    }
    res = c.evaluate_samples(
        "livecodebench", probs, samples, ks=(1,), workers=2, suites={"livecodebench": {"timeout_s": 1}}
    )
    rec = {(r["problem_id"], r["sample"]): r for r in res["records"]}
    assert rec[("abc900_a", 0)]["passed"]
    assert not rec[("abc900_a", 1)]["passed"] and rec[("abc900_a", 1)]["exec_ok"]
    assert not rec[("abc900_a", 2)]["exec_ok"] and "NameError" in rec[("abc900_a", 2)]["detail"]
    assert not rec[("3900", 0)]["passed"] and rec[("3900", 0)]["n_pass"] == 1  # right on the public test only
    assert not rec[("3900", 1)]["passed"] and "timeout" in rec[("3900", 1)]["detail"]
    assert rec[("abc700_a", 0)]["passed"] and not rec[("abc700_a", 1)]["passed"]


def test_livecodebench_stdio_comparison():
    from codegrpo.eval.suite_driver import lcb_stdio_match

    assert lcb_stdio_match("1 2\n3.50\n", "1 2\n3.5")
    assert lcb_stdio_match("  a b \n", "a b")
    assert not lcb_stdio_match("1 2\n", "1 2\n3\n")
    assert not lcb_stdio_match("0.1\n", "0.10001")
    assert not lcb_stdio_match("yes\n", "YES\n")


def test_livecodebench_bad_records_name_file_line_and_field(tmp_path):
    bad = dict(LCB[0], private_test_cases="%%% not base64 %%%")
    path = write_jsonl(tmp_path / "test6.jsonl", [LCB[1], bad])
    with pytest.raises(s.BenchmarkDataError, match=r"test6\.jsonl: line 2: field 'private_test_cases'"):
        s.load_livecodebench(path, "v6")
    no_fn = dict(LCB[1], metadata="{}")
    with pytest.raises(s.BenchmarkDataError, match=r"line 1: functional tests but no metadata\.func_name"):
        s.load_livecodebench(write_jsonl(tmp_path / "t.jsonl", [no_fn]), "v6")
    missing = {k: v for k, v in LCB[0].items() if k != "contest_date"}
    with pytest.raises(s.BenchmarkDataError, match=r"line 1: field 'contest_date' is missing"):
        s.load_livecodebench(write_jsonl(tmp_path / "m.jsonl", [missing]), "v6")


# --------------------------------------------------------------------------------------------------------
# BigCodeBench

_BCB_TEST_MEAN = """import unittest
import numpy as np


class TestCases(unittest.TestCase):
    def test_mean(self):
        self.assertAlmostEqual(task_func([1, 2, 3]), 2.0)

    def test_array(self):
        out = task_func(np.array([4.0, 6.0]))
        self.assertIsInstance(out, float)
        self.assertEqual(out, 5.0)

    def test_empty(self):
        with self.assertRaises(ValueError):
            task_func([])
"""

_BCB_TEST_FRAME = """import unittest
import pandas as pd


class TestCases(unittest.TestCase):
    def test_counts(self):
        df = task_func(["a", "b", "a"])
        self.assertListEqual(list(df.columns), ["word", "count"])
        self.assertEqual(df.set_index("word")["count"].to_dict(), {"a": 2, "b": 1})

    def test_sorted(self):
        df = task_func(["z", "y", "y"])
        self.assertEqual(list(df["word"]), ["y", "z"])
"""


def _bcb_record(tid, entry, code_prompt, doc, body, test, libs, instruct):
    complete = code_prompt + '    """\n' + doc + '\n    """\n'
    return {
        "task_id": tid,
        "complete_prompt": complete,
        "instruct_prompt": instruct,
        "canonical_solution": body,
        "code_prompt": code_prompt,
        "test": test,
        "entry_point": entry,
        "doc_struct": json.dumps({"description": [doc]}),
        "libs": repr(libs),
    }


BCB = [
    _bcb_record(
        "BigCodeBench/9000",
        "task_func",
        "import numpy as np\n\ndef task_func(values):\n",
        "    Mean of the values as a Python float; ValueError when empty.",
        "    arr = np.asarray(values, dtype=float)\n    if arr.size == 0:\n"
        "        raise ValueError('empty')\n    return float(arr.mean())\n",
        _BCB_TEST_MEAN,
        ["numpy"],
        "Return the mean of the values as a Python float; raise ValueError when empty.\n"
        "You should write self-contained code starting with:\n```\nimport numpy as np\n"
        "def task_func(values):\n```",
    ),
    _bcb_record(
        "BigCodeBench/9001",
        "task_func",
        "import pandas as pd\nfrom collections import Counter\n\ndef task_func(words):\n",
        "    A DataFrame of word counts (columns word, count) sorted by count, then word.",
        "    c = Counter(words)\n    rows = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))\n"
        "    return pd.DataFrame(rows, columns=['word', 'count'])\n",
        _BCB_TEST_FRAME,
        ["pandas", "collections"],
        "Count words into a DataFrame (columns word, count) sorted by count then word.\n"
        "You should write self-contained code starting with:\n```\nimport pandas as pd\n"
        "from collections import Counter\ndef task_func(words):\n```",
    ),
]


def test_bigcodebench_canonical_passes_wrong_fails_and_missing_libraries_are_named(tmp_path):
    missing = _bcb_record(
        "BigCodeBench/9002",
        "task_func",
        "import not_a_real_lib_xyz\n\ndef task_func():\n",
        "    Uses a library this environment lacks.",
        "    return not_a_real_lib_xyz.run()\n",
        "import unittest\n\n\nclass TestCases(unittest.TestCase):\n    def test_run(self):\n"
        "        self.assertTrue(task_func())\n",
        ["not_a_real_lib_xyz"],
        "Run it.",
    )
    path = write_jsonl(tmp_path / "bigcodebench-hard.jsonl", BCB + [missing])
    probs = s.load_bigcodebench("bigcodebench_hard", path, "v0.1.4")
    assert probs[0].extra["libs"] == ["numpy"] and "self-contained" in probs[0].prompt
    ref = c.evaluate_samples("bigcodebench_hard", probs, c.reference_samples(probs), extract=False, workers=2)
    rec = {r["problem_id"]: r for r in ref["records"]}
    assert rec["BigCodeBench/9000"]["passed"] and rec["BigCodeBench/9001"]["passed"], ref["records"]
    assert not rec["BigCodeBench/9002"]["passed"]
    assert rec["BigCodeBench/9002"]["detail"] == "missing libraries: not_a_real_lib_xyz"
    assert ref["missing_libraries"] == {"not_a_real_lib_xyz": ["BigCodeBench/9002"]}
    samples = {
        # calibrated: the code_prompt's imports come first, so a body-only answer with its own def still works
        "BigCodeBench/9000": [
            _fence(
                "def task_func(values):\n    arr = np.asarray(values, dtype=float)\n"
                "    if arr.size == 0:\n        raise ValueError\n    return float(arr.sum() / arr.size)"
            ),
            _fence("def task_func(values):\n    return sum(values) / len(values)"),
        ],
        "BigCodeBench/9001": [
            _fence("def task_func(words):\n    return pd.DataFrame({'word': sorted(set(words))})"),
            _fence("import time\ndef task_func(words):\n    time.sleep(30)"),
        ],
        "BigCodeBench/9002": ["```python\ndef task_func():\n    return True\n```"] * 2,
    }
    res = c.evaluate_samples(
        "bigcodebench_hard", probs, samples, ks=(1,), workers=2, suites={"bigcodebench": {"timeout_s": 3}}
    )
    r = {(x["problem_id"], x["sample"]): x for x in res["records"]}
    assert r[("BigCodeBench/9000", 0)]["passed"]
    assert not r[("BigCodeBench/9000", 1)]["passed"] and "test_empty" in r[("BigCodeBench/9000", 1)]["detail"]
    assert r[("BigCodeBench/9000", 1)]["n_pass"] == 2 and r[("BigCodeBench/9000", 1)]["n_test"] == 3
    assert not r[("BigCodeBench/9001", 0)]["passed"] and r[("BigCodeBench/9001", 0)]["exec_ok"]
    assert not r[("BigCodeBench/9001", 1)]["passed"] and "time limit" in r[("BigCodeBench/9001", 1)]["detail"]
    assert not r[("BigCodeBench/9002", 0)]["passed"]  # never run: its library is missing
    assert res["missing_libraries"] == {"not_a_real_lib_xyz": ["BigCodeBench/9002"]}


def test_bigcodebench_bad_records_name_file_line_and_field(tmp_path):
    bad = dict(BCB[0], libs="['numpy'")
    with pytest.raises(s.BenchmarkDataError, match=r"b\.jsonl: line 2: field 'libs' is not a list literal"):
        s.load_bigcodebench("bigcodebench_full", write_jsonl(tmp_path / "b.jsonl", [BCB[1], bad]), "v0.1.4")
    no_test = {k: v for k, v in BCB[0].items() if k != "test"}
    with pytest.raises(s.BenchmarkDataError, match=r"line 1: field 'test' is missing"):
        s.load_bigcodebench("bigcodebench_full", write_jsonl(tmp_path / "c.jsonl", [no_test]), "v0.1.4")


# --------------------------------------------------------------------------------------------------------
# Shipped samples (the default CPU pipeline) and the DHRCL table


def test_shipped_samples_pass_and_feed_the_dhrcl_table(tmp_path):
    from codegrpo import tables
    from codegrpo.config import load_config

    cfg = load_config(REPO / "config.yaml")["evaluate"]["codegen"]
    paths = []
    for b in s.SUITE_BENCHMARKS:
        out = tmp_path / "eval" / "reference" / f"{b}.json"
        res = c.run_reference(b, out, workers=2, suites=cfg, cfg={"benchmark": b})
        assert res["pass@k"]["1"] == 100.0, (b, res["records"])
        assert res["benchmark_version"] and res["data"] == str(cfg[b]["source"])
        paths.append(out)
    lcb = json.loads((tmp_path / "eval" / "reference" / "livecodebench.json").read_text())
    assert lcb["n_problems"] == 2 and lcb["date_window"] == ["2025-01-01", None]  # the 2024 problem is outside
    bench = ["humaneval_plus", "mbpp_plus", "bigcodebench_full", "bigcodebench_hard", "livecodebench"]
    t = tables.table_dhrcl(tables.load_results(paths), tables.load_published(), benchmarks=bench)
    ours = next(r for r in t.rows if r["origin"] == tables.OURS)
    assert ours["HumanEval pass@1"] == ours["HumanEval+ pass@1"] == ours["MBPP+ pass@1"] == 100.0
    assert ours["paper avg pass@1"] == 100.0 and ours.get("CodeElo pass@1") is None
    pub = next(r for r in t.rows if r["method"] == "DHRCL (Qwen3-8B)")
    assert pub["paper avg pass@1"] == "50.3 ± 0.2" and pub["origin"] == tables.PUBLISHED
    notes = " ".join(t.notes)
    assert "online judge" in notes and "published numbers only" in notes
    assert "livecodebench: v6 (data/codegen_samples/livecodebench, contest dates 2025-01-01 to …)" in notes
    assert t.columns[2:11] == [
        "HumanEval pass@1",
        "HumanEval+ pass@1",
        "MBPP pass@1",
        "MBPP+ pass@1",
        "BigCodeBench Full pass@1",
        "BigCodeBench Hard pass@1",
        "LiveCodeBench v6 pass@1",
        "CodeElo pass@1",
        "avg pass@1",
    ]


def test_run_python_returns_collected_files_and_enforces_the_limit():
    from codegrpo.sandbox import Sandbox

    with Sandbox() as sb:
        res, got = sb.run_python(
            "import sys\nopen('out.txt', 'w').write(sys.stdin.read()[::-1] + open('in.txt').read())",
            files={"in.txt": "!"},
            stdin="abc",
            collect=["out.txt", "absent.txt"],
        )
        assert res.ok and got == {"out.txt": b"cba!"}
        res, got = sb.run_python("while True:\n    pass\n", timeout_s=1, collect=["out.txt"])
        assert res.timed_out and not res.ok and got == {}
        res, _ = sb.run_python("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)")
        assert res.returncode != 0  # no network inside the sandbox


def test_evalplus_part_time_limit_stops_a_slow_but_correct_program(tmp_path):
    task = dict(HE_PLUS[0], plus_input=[[[i]] for i in range(12)])
    probs = s.load_evalplus("humaneval_plus", write_jsonl(tmp_path / "he.jsonl", [task]))
    slow = "import time\ndef sum_squares(xs):\n    time.sleep(0.25)\n    return sum(x * x for x in xs)\n"
    opts = {"evalplus": {"min_time_limit_s": 0.5, "task_timeout_s": 1.5}}
    res = c.evaluate_samples("humaneval_plus", probs, {"HumanEval/900": [slow]}, extract=False, suites=opts)
    rec = res["records"][0]
    # base: 2 inputs x 0.25 s within min(1.5, 2 x 0.5) + 1 s; plus: 12 x 0.25 s > min(1.5, 12 x 0.5) + 1 s
    assert rec["passed_base"] and not rec["passed"] and "part's time limit" in rec["detail"]


def test_failing_reference_tasks_are_listed_under_the_table(tmp_path):
    from codegrpo import tables

    missing = _bcb_record(
        "BigCodeBench/9002",
        "task_func",
        "import not_a_real_lib_xyz\n\ndef task_func():\n",
        "    Needs a missing library.",
        "    return 1\n",
        "import unittest\n\n\nclass TestCases(unittest.TestCase):\n    def test_one(self):\n"
        "        self.assertEqual(task_func(), 1)\n",
        ["not_a_real_lib_xyz"],
        "Return 1.",
    )
    src = write_jsonl(tmp_path / "bcb.jsonl", BCB[:1] + [missing])
    out = tmp_path / "reference" / "bigcodebench_full.json"
    c.run_reference("bigcodebench_full", out, suites={"bigcodebench_full": {"source": str(src), "version": "v0.1.4"}})
    t = tables.table_dhrcl(tables.load_results([out]), tables.load_published(), benchmarks=["bigcodebench_full"])
    assert next(r for r in t.rows if r["origin"] == tables.OURS)["BigCodeBench Full pass@1"] == 50.0
    note = next(n for n in t.notes if n.startswith("Reference solutions failing"))
    assert "bigcodebench_full: 1 of 2: BigCodeBench/9002 (missing libraries: not_a_real_lib_xyz)" in note
    assert "Missing libraries: not_a_real_lib_xyz." in note


def test_sources_by_url_and_parquet(tmp_path, monkeypatch):
    """An EvalPlus release by URL (a loopback HTTP server stands in for GitHub) is downloaded once into the cache;
    a BigCodeBench parquet file (the hub's storage format) loads like JSONL."""
    import functools
    import http.server
    import threading

    import pandas as pd

    served = tmp_path / "served"
    served.mkdir()
    write_jsonl(served / "HumanEvalPlus.jsonl.gz", HE_PLUS[:2], gz=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("CODEGRPO_URL_CACHE", str(tmp_path / "cache"))
        monkeypatch.delenv("CODEGRPO_URLS_OFFLINE", raising=False)
        url = f"http://127.0.0.1:{server.server_address[1]}/HumanEvalPlus.jsonl.gz"
        probs = s.load_evalplus("humaneval_plus", url)
        assert [p.problem_id for p in probs] == ["HumanEval/900", "HumanEval/901"]
        cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
        assert len(cached) == 2 and cached[0].endswith("HumanEvalPlus.jsonl.gz") and cached[1].endswith(".sha256")
        with pytest.raises(HubError, match=r"missing\.jsonl\.gz: download failed: HTTP Error 404"):
            s.resolve_source(f"http://127.0.0.1:{server.server_address[1]}/missing.jsonl.gz")
        assert len(list((tmp_path / "cache").iterdir())) == 2  # no partial file left behind
    finally:
        server.shutdown()
        server.server_close()
    assert len(s.load_evalplus("humaneval_plus", url)) == 2  # from the cache: the server is gone
    pq = tmp_path / "test-00000-of-00001.parquet"
    pd.DataFrame(BCB).to_parquet(pq)
    probs = s.load_bigcodebench("bigcodebench_full", pq, "v0.1.4", prompt="complete")
    assert [p.problem_id for p in probs] == ["BigCodeBench/9000", "BigCodeBench/9001"]
    assert "def task_func(values):" in probs[0].prompt and probs[1].extra["libs"] == ["pandas", "collections"]

"""EvalPlus suites (HumanEval+, MBPP+): loader and sandboxed harness (codegrpo.eval.suites)."""

from __future__ import annotations

import os
import pickle
import threading
from typing import Mapping

from codegrpo.eval.problems import Problem, SampleResult, humaneval_program, humaneval_prompt, parses
from codegrpo.eval.suites.common import (
    BenchmarkDataError,
    driver_source,
    exec_note,
    need,
    read_records,
    resolve_source,
    result_json,
    suite_verdict,
    verdict_result,
)

# EvalPlus special oracles (evalplus/eval/_special_oracle.py): MBPP+ tasks compared as sets, and tasks whose
# outputs are only checked for being not None.
MBPP_SET_EQ_TASKS = (
    "similar_elements",
    "find_char_long",
    "common_in_nested_lists",
    "extract_singly",
    "larg_nnum",
    "intersection_array",
    "find_dissimilar",
    "Diff",
)
MBPP_NOT_NONE_TASKS = ("check_str", "text_match_three", "text_starta_endb")


def _tuple_deep(x):
    return tuple(_tuple_deep(i) for i in x) if isinstance(x, list) else x


def mbpp_plus_inputs(task_id: str, inputs: list) -> list:
    """MBPP+ inputs as the tasks expect them: JSON has no tuples, sets or complex numbers, so EvalPlus restores
    them per task (evalplus/data/mbpp.py, ``mbpp_deserialize_inputs``); the same task numbers here."""
    n = int(str(task_id).rsplit("/", 1)[-1])
    if n in {
        2,
        116,
        132,
        143,
        222,
        261,
        273,
        394,
        399,
        421,
        424,
        429,
        470,
        560,
        579,
        596,
        616,
        630,
        726,
        740,
        744,
        809,
    }:
        return [[tuple(a) for a in inp] for inp in inputs]
    if n in {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}:
        return [[[tuple(x) for x in a] for a in inp] for inp in inputs]
    if n in {75, 413, 444, 753}:
        return [[[tuple(x) for x in inp[0]], inp[1]] for inp in inputs]
    if n in {106, 750}:
        return [[inp[0], tuple(inp[1])] for inp in inputs]
    if n == 115:
        return [[[set(x) if isinstance(x, list) and x else {} for x in inp[0]]] for inp in inputs]
    if n == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if n in {250, 405, 446, 617, 720, 763, 808}:
        return [[tuple(inp[0]), inp[1]] for inp in inputs]
    if n in {259, 401, 445}:
        return [[tuple(tuple(x) for x in a) for a in inp] for inp in inputs]
    if n == 278:
        return [[tuple(tuple(x) if isinstance(x, list) else x for x in inp[0])] for inp in inputs]
    if n == 307:
        return [[tuple(inp[0]), inp[1], inp[2]] for inp in inputs]
    if n == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}, *inp[1:]] for inp in inputs]
    if n == 252:
        return [[complex(inp[0])] for inp in inputs]
    if n in {580, 615, 791}:
        return [_tuple_deep(inp) for inp in inputs]
    return inputs


_EVALPLUS_FIELDS = {
    "task_id": str,
    "prompt": str,
    "entry_point": str,
    "canonical_solution": str,
    "base_input": list,
    "plus_input": list,
    "atol": (int, float),
}
# HumanEval+ carries HumanEval's check program in `test`; MBPP+ carries `assertion` (and, in some releases, the
# original `test`). Neither is run: EvalPlus derives the expected outputs from the canonical solution.


def mbpp_question(prompt: str) -> str:
    """The task text of an MBPP+ prompt (a docstring holding the description and one example assertion)."""
    text = prompt.strip()
    for q in ('"""', "'''"):
        if text.startswith(q) and text.endswith(q) and len(text) >= 6:
            text = text[3:-3]
    return text.strip()


def load_evalplus(benchmark: str, source: str | os.PathLike, limit: int | None = None) -> list[Problem]:
    kind, path = resolve_source(source)
    if kind != "file":
        raise ValueError(
            f"{source}: EvalPlus releases are files (HumanEvalPlus-v*.jsonl.gz / MbppPlus-v*.jsonl.gz, "
            "a path or URL), not hub datasets"
        )
    dataset = "humaneval" if benchmark == "humaneval_plus" else "mbpp"
    fields = dict(_EVALPLUS_FIELDS, **({"assertion": str} if dataset == "mbpp" else {"test": str}))
    out = []
    for line, rec in read_records(path):
        need(path, line, rec, fields)
        if not isinstance(rec.get("test", ""), str):
            raise BenchmarkDataError(f"{path}: line {line}: field 'test' must be str")
        for part in ("base_input", "plus_input"):
            for j, inp in enumerate(rec[part]):
                if not isinstance(inp, list):
                    raise BenchmarkDataError(
                        f"{path}: line {line}: field {part!r}: input {j} must be a list of arguments"
                    )
        base, plus = rec["base_input"], rec["plus_input"]
        if dataset == "mbpp":
            base, plus = mbpp_plus_inputs(rec["task_id"], base), mbpp_plus_inputs(rec["task_id"], plus)
            from codegrpo.data.kodcode import build_prompt

            prompt = build_prompt(mbpp_question(rec["prompt"]), None, [rec["entry_point"]], tests_import=False)
            prefix = ""
        else:
            prompt, prefix = humaneval_prompt(rec["prompt"], rec["entry_point"]), rec["prompt"]
        out.append(
            Problem(
                problem_id=rec["task_id"],
                prompt=prompt,
                tests=rec.get("test") or rec.get("assertion", ""),
                entry_point=rec["entry_point"],
                reference=rec["prompt"] + rec["canonical_solution"],
                prefix=prefix,
                extra={
                    "suite": "evalplus",
                    "dataset": dataset,
                    "atol": float(rec["atol"] or 0),
                    "inputs": {"base": base, "plus": plus},
                    "source": f"{path}:{line}",
                    "lock": threading.Lock(),
                },
            )
        )
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise BenchmarkDataError(f"{path}: no tasks")
    return out


def _evalplus_program(problem: Problem, code: str) -> str:
    """HumanEval+: a program that defines the entry point runs after the whole prompt (whose helpers, e.g.
    ``poly`` of find_zero, and imports it may use; the prompt's function is complete, a docstring body), else
    the code is the body of the prompt's function (EvalPlus: prompt + completion)."""
    if problem.extra["dataset"] == "humaneval":
        joined = humaneval_program(problem, code)
        if joined.startswith(problem.prefix):
            return joined
        full = problem.prefix.rstrip() + "\n\n\n" + code
        return full if parses(full) or not parses(code) else joined
    return code


def _ground_truth(problem: Problem, sandbox, cfg: Mapping) -> tuple[bytes, dict]:
    """The canonical solution's outputs (pickled, opaque to the host) and run times, once per problem."""
    ex = problem.extra
    with ex["lock"]:
        if "gt" not in ex:
            task = {
                "entry_point": problem.entry_point,
                "inputs": ex["inputs"],
                "output_not_none": ex["dataset"] == "mbpp" and problem.entry_point in MBPP_NOT_NONE_TASKS,
            }
            res, got = sandbox.run_python(
                driver_source(),
                args=["evalplus_gt"],
                files={"solution.py": problem.reference, "task.pkl": pickle.dumps(task)},
                timeout_s=float(cfg.get("gt_timeout_s", 600)),
                collect=["result.json", "expected.pkl"],
            )
            info = result_json(got)
            if not info.get("ok") or "expected.pkl" not in got:
                raise RuntimeError(
                    f"{ex['source']}: task {problem.problem_id}: expected outputs not computed: "
                    f"{info.get('error') or exec_note(res)}"
                )
            ex["gt"] = (got["expected.pkl"], info["times"])
        return ex["gt"]


def score_evalplus(problem: Problem, code: str, sample: int, sandbox, timeout: float, cfg: Mapping) -> SampleResult:
    expected, times = _ground_truth(problem, sandbox, cfg)
    program = _evalplus_program(problem, code)
    tmin, factor, cap = (
        float(cfg.get("min_time_limit_s", 4.0)),
        float(cfg.get("gt_time_limit_factor", 4.0)),
        float(cfg.get("task_timeout_s", 60.0)),
    )
    limits = {part: [max(tmin, factor * t) for t in ts] for part, ts in times.items()}
    task = {
        "entry_point": problem.entry_point,
        "dataset": problem.extra["dataset"],
        "atol": problem.extra["atol"],
        "inputs": problem.extra["inputs"],
        "time_limits": limits,
        "parts": ["base", "plus"],
        "import_limit": cap,
        "set_eq_tasks": MBPP_SET_EQ_TASKS,
        "not_none_tasks": MBPP_NOT_NONE_TASKS,
        "part_timeout": {part: min(cap, sum(v)) + 1 for part, v in limits.items()},
    }
    wall = cap + sum(task["part_timeout"].values()) + 2
    out, res = suite_verdict(
        sandbox, "evalplus", task, {"solution.py": program}, wall, runner_files={"expected.pkl": expected}
    )
    base, plus = out.get("base") or {}, out.get("plus") or {}
    base_ok = base.get("status") == "pass"
    plus_ok = base_ok and plus.get("status") == "pass"
    n_test = sum(len(v) for v in problem.extra["inputs"].values())
    n_pass = int(base.get("n_pass", 0)) + int(plus.get("n_pass", 0))
    detail = ""
    if not plus_ok:
        failed = base if not base_ok else plus
        detail = (
            f"{'base' if not base_ok else 'plus'}: {failed.get('status', 'fail')}: "
            f"{failed.get('error') or out.get('error') or exec_note(res)}"
        )[:300]
    return verdict_result(problem, sample, program, out, plus_ok, n_pass, n_test, detail, passed_base=base_ok)

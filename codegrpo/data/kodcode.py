"""KodCode preparation for DHRCL (spec dhrcl.md section 3).

Input: KodCode-V1 records, either JSON arrays (the shipped demo files) or JSONL files. Fields used:
``question_id``, ``question``, ``solution`` (reference, feeds r_AST), ``test_code`` (pytest file importing from
a module named ``solution``; the Hub release calls it ``test``, accepted as an alias) and ``test_info`` (list of
``{function_name, function_declaration, ...}``; null for some class-based tasks, whose entry points are then
the names the tests import from ``solution`` or, when the tests import nothing, the reference solution's
top-level names that the tests use without defining them).

Many KodCode tests call the functions without importing them (they expect the solution in their namespace);
``extra_info.tests_import_solution`` says which kind a row is, so the executor knows whether to run the tests
after ``from solution import *``. Records whose tests define the entry point themselves (they pass whatever
the answer) or that have no determinable entry point are *filtered*: counted and listed with the reason in
``summary.json`` (``filtered_records``), not errors.

Every record is checked like the SK2Decompile inputs: a bad record stops the stage with file, line and field
(``on_bad_record: error``) or goes to ``rejects.jsonl`` (``quarantine``). A JSON syntax error inside an array
cannot be skipped safely (the rest of the array has no reliable boundaries), so it always stops the stage.

KodCode has no test split: fixed validation and held-out slices are carved by a hash of ``question_id``
(config fractions), the rest is train. Output rows follow verl's RL schema with ``data_source = "kodcode"``,
``reward_model.ground_truth`` = the test code and ``extra_info`` = ``index``, ``split``, ``question_id``,
``reference_solution``, ``test_code``, ``entry_points``.
"""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path
from typing import Iterator

from codegrpo.contracts import KODCODE
from codegrpo.data.ingest import (
    DEFAULT_MAX_LINE_BYTES,
    BadRecord,
    DataError,
    _Reject,
    check_text,
    iter_raw_lines,
)
from codegrpo.data.parquet import assign_slices, rl_schema, write_table
from codegrpo.io import atomic_group, write_json, write_jsonl

log = logging.getLogger(__name__)

DATA_SOURCE = KODCODE
ABILITY = "code"
SLICES = ("train", "val", "heldout")

PROMPT_TEMPLATE = (
    "Write a Python solution to the following problem.\n\n"
    "{question}\n\n"
    "{contract}\n\n"
    "Return the complete Python code in a single ```python code block."
)


def build_prompt(question: str, test_info: list[dict] | None, entry_points: list[str],
                 tests_import: bool = True) -> str:
    decls = [t.get("function_declaration") for t in (test_info or []) if t.get("function_declaration")]
    if decls:
        contract = "Your code must define:\n" + "\n".join(d.strip() for d in decls)
    else:
        contract = "Your code must define: " + ", ".join(entry_points)
    if tests_import:
        contract += "\n(The tests import these names from a module named `solution`.)"
    return PROMPT_TEMPLATE.format(question=question.strip(), contract=contract)


def imported_names(test_code: str) -> list[str]:
    """Names imported by ``from solution import ...`` in the test code (in order, without duplicates)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(test_code)):
        if isinstance(node, ast.ImportFrom) and node.module == "solution":
            names.extend(a.name for a in node.names if a.name != "*")
    return list(dict.fromkeys(names))


def imports_solution(test_code: str) -> bool:
    """Do the tests import anything from the module ``solution``? (Many KodCode tests call the functions
    without importing them, expecting the solution in the same namespace.)"""
    return any(isinstance(n, ast.ImportFrom) and n.module == "solution" for n in ast.walk(ast.parse(test_code)))


def top_level_names(code: str) -> list[str]:
    """Functions and classes defined at the top level of ``code``."""
    tree = ast.parse(code)
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def used_names(code: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}


class Filtered(Exception):
    """A well-formed record that cannot serve as an RL task (counted and listed in the summary, not an error)."""


def _parse_python(code: str, field: str) -> None:
    try:
        ast.parse(code)
    except SyntaxError as exc:
        raise _Reject(field, f"not valid Python: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # e.g. source contains null bytes
        raise _Reject(field, f"not valid Python: {exc}") from None


def parse_kodcode_record(obj) -> dict:
    """Validate one KodCode record; return the fields the DHRCL rows need."""
    if not isinstance(obj, dict):
        raise _Reject("(json)", f"expected a JSON object, got {type(obj).__name__}")
    for key in ("question_id", "question", "solution"):
        if key not in obj:
            raise _Reject(key, "missing")
    qid = check_text(obj["question_id"], "question_id")
    question = check_text(obj["question"], "question")
    solution = check_text(obj["solution"], "solution")
    tkey = "test_code" if "test_code" in obj else "test" if "test" in obj else None
    if tkey is None:
        raise _Reject("test_code", "missing (neither test_code nor test)")
    test_code = check_text(obj[tkey], tkey)
    _parse_python(solution, "solution")
    _parse_python(test_code, tkey)
    test_info = obj.get("test_info")
    test_defs = set(top_level_names(test_code))
    if test_info is not None:
        if not isinstance(test_info, list):
            raise _Reject("test_info", f"expected a list or null, got {type(test_info).__name__}")
        for i, t in enumerate(test_info):
            if not isinstance(t, dict):
                raise _Reject(f"test_info[{i}]", f"expected an object, got {type(t).__name__}")
            if "function_name" not in t:
                raise _Reject(f"test_info[{i}].function_name", "missing")
            check_text(t["function_name"], f"test_info[{i}].function_name")
            if t.get("function_declaration") is not None:
                check_text(t["function_declaration"], f"test_info[{i}].function_declaration")
        entry_points = list(dict.fromkeys(t["function_name"] for t in test_info))
    else:
        entry_points = imported_names(test_code)
        if not entry_points:
            used = used_names(test_code)
            entry_points = [n for n in top_level_names(solution) if n in used and n not in test_defs]
    if not entry_points:
        raise Filtered("no entry point: test_info is null and the tests use no name of the reference solution "
                       "that they do not define themselves")
    own = [n for n in entry_points if n in test_defs]
    if own and not imports_solution(test_code):
        raise Filtered(f"the tests define the entry point(s) {own} themselves, so they cannot check an answer")
    return {"question_id": qid, "question": question, "solution": solution, "test_code": test_code,
            "entry_points": entry_points, "tests_import_solution": imports_solution(test_code),
            "prompt": build_prompt(question, test_info, entry_points, imports_solution(test_code))}


def iter_json_array(path: Path) -> Iterator[tuple[int, object]]:
    """Yield ``(line_number, element)`` for each element of a top-level JSON array, tracking line numbers."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(path, raw[: exc.start].count(b"\n") + 1, "(file)", f"not valid UTF-8 (byte {exc.start})") from None
    dec = json.JSONDecoder()
    n = len(text)

    def skip_ws(i: int) -> int:
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i

    def line_of(i: int) -> int:
        return text.count("\n", 0, i) + 1

    i = skip_ws(0)
    if i >= n or text[i] != "[":
        raise DataError(path, line_of(i), "(json)", "expected a JSON array of records")
    i = skip_ws(i + 1)
    if i < n and text[i] == "]":
        return
    while True:
        try:
            obj, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise DataError(path, exc.lineno, "(json)", f"invalid JSON: {exc.msg} at column {exc.colno}") from None
        except RecursionError:
            raise DataError(path, line_of(i), "(json)", "JSON nested too deeply") from None
        yield line_of(i), obj
        i = skip_ws(end)
        if i < n and text[i] == ",":
            i = skip_ws(i + 1)
            continue
        if i < n and text[i] == "]":
            if skip_ws(i + 1) != n:
                raise DataError(path, line_of(skip_ws(i + 1)), "(json)", "trailing data after the array")
            return
        raise DataError(path, line_of(i), "(json)", "expected ',' or ']' between records")


def iter_records(path: Path, max_line_bytes: int) -> Iterator[tuple[int, object, bytes | None]]:
    """``(line, parsed object or _Reject, raw snippet)`` for a .json array file or a JSONL file."""
    if path.suffix == ".json":
        for line, obj in iter_json_array(path):
            yield line, obj, None
        return
    for line, raw, size in iter_raw_lines(path, max_line_bytes):
        if raw is None:
            yield line, _Reject("(line)", f"line is {size} bytes, over max_line_bytes={max_line_bytes}"), None
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield line, _Reject("(line)", f"not valid UTF-8 (byte {exc.start})"), raw
            continue
        if not text.strip():
            yield line, _Reject("(line)", "blank line"), raw
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            obj = _Reject("(json)", f"invalid JSON: {exc.msg} at column {exc.colno}")
        except RecursionError:
            obj = _Reject("(json)", "JSON nested too deeply")
        yield line, obj, raw


def rl_row(rec: dict, index: int, split: str) -> dict:
    """The verl RL row of a parsed KodCode record (:func:`parse_kodcode_record`)."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": rec["prompt"]}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": rec["test_code"]},
        "extra_info": {
            "index": index,
            "split": split,
            "question_id": rec["question_id"],
            "reference_solution": rec["solution"],
            "test_code": rec["test_code"],
            "entry_points": rec["entry_points"],
            "tests_import_solution": rec["tests_import_solution"],
        },
    }


def prepare_kodcode(
    paths: list[str],
    *,
    out_dir,
    val_fraction: float,
    heldout_fraction: float,
    seed: int,
    on_bad_record: str = "error",
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> dict:
    """Validate the KodCode files and write ``{train,val,heldout}.parquet``, ``rejects.jsonl`` and
    ``summary.json`` under ``out_dir``. Nothing is written when a record stops the stage."""
    if val_fraction + heldout_fraction >= 1.0:
        raise ValueError("kodcode val_fraction + heldout_fraction must be < 1")
    records: list[dict] = []
    rejects: list[BadRecord] = []
    filtered: list[dict] = []
    seen: dict[str, str] = {}
    lines = 0
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise FileNotFoundError(f"KodCode input file {path} does not exist")
        for line, obj, raw in iter_records(path, max_line_bytes):
            lines += 1
            try:
                if isinstance(obj, _Reject):
                    raise obj
                rec = parse_kodcode_record(obj)
                if rec["question_id"] in seen:
                    raise _Reject("question_id", f"duplicate question_id {rec['question_id']!r} (first at {seen[rec['question_id']]})")
                seen[rec["question_id"]] = f"{path}:{line}"
            except Filtered as why:
                filtered.append({"question_id": obj.get("question_id"), "file": str(path), "line": line,
                                 "reason": str(why)})
                log.info("%s:%d: %s filtered: %s", path, line, obj.get("question_id"), why)
                continue
            except _Reject as rej:
                if on_bad_record == "error":
                    raise DataError(path, line, rej.field, rej.reason) from None
                if raw is not None:
                    snippet = raw[:200].decode("utf-8", errors="replace")
                else:
                    snippet = "" if isinstance(obj, _Reject) else json.dumps(obj)[:200]
                rejects.append(BadRecord(str(path), line, rej.field, rej.reason, snippet))
                log.warning("%s:%d: field '%s': %s (quarantined)", path, line, rej.field, rej.reason)
                continue
            records.append(rec)
    if not records:
        raise DataError(paths[-1] if paths else "(none)", 0, "(file)", "no valid KodCode record")
    slices = assign_slices([r["question_id"] for r in records],
                           {"val": val_fraction, "heldout": heldout_fraction}, seed)
    rows: dict[str, list[dict]] = {s: [] for s in SLICES}
    for index, rec in enumerate(records):
        split = slices[rec["question_id"]]
        rows[split].append(rl_row(rec, index, split))
    out_dir = Path(out_dir)
    schema = rl_schema("kodcode")
    with atomic_group():  # the slices, rejects and summary appear together or not at all
        for s in SLICES:
            write_table(rows[s], schema, out_dir / f"{s}.parquet")
        write_jsonl(out_dir / "rejects.jsonl", (r.to_json() for r in rejects))
        summary = {
            "inputs": [str(p) for p in paths],
            "on_bad_record": on_bad_record,
            "records_read": lines,
            "accepted": len(records),
            "rejected": len(rejects),
            "rejected_by_field": {f: sum(1 for r in rejects if r.field == f) for f in {r.field for r in rejects}},
            "filtered": len(filtered),
            "filtered_records": filtered,
            "slices": {s: len(rows[s]) for s in SLICES},
            "val_fraction": val_fraction,
            "heldout_fraction": heldout_fraction,
            "seed": seed,
        }
        write_json(out_dir / "summary.json", summary)
    log.info("kodcode: %d read, %d accepted, %d filtered, %d rejected; slices %s", lines, len(records),
             len(filtered), len(rejects), summary["slices"])
    return summary

"""KodCode records: the training prompt, record parsing and the JSON / JSONL readers (codegrpo.data.kodcode)."""

from __future__ import annotations

from codegrpo.contracts import parse_python
import ast
import json
import logging
from pathlib import Path
from typing import Iterator

from codegrpo.contracts import KODCODE
from codegrpo.data.ingest import DataError, Reject, check_text, iter_raw_lines

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


def build_prompt(
    question: str, test_info: list[dict] | None, entry_points: list[str], tests_import: bool = True
) -> str:
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
    for node in ast.walk(parse_python(test_code)):
        if isinstance(node, ast.ImportFrom) and node.module == "solution":
            names.extend(a.name for a in node.names if a.name != "*")
    return list(dict.fromkeys(names))


def imports_solution(test_code: str) -> bool:
    """Do the tests import anything from the module ``solution``? (Many KodCode tests call the functions
    without importing them, expecting the solution in the same namespace.)"""
    return any(isinstance(n, ast.ImportFrom) and n.module == "solution" for n in ast.walk(parse_python(test_code)))


def top_level_names(code: str) -> list[str]:
    """Functions and classes defined at the top level of ``code``."""
    tree = parse_python(code)
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def used_names(code: str) -> set[str]:
    return {n.id for n in ast.walk(parse_python(code)) if isinstance(n, ast.Name)}


class Filtered(Exception):
    """A well-formed record that cannot serve as an RL task (counted and listed in the summary, not an error).
    ``kind``: the reason's category, the key of ``filtered_by_reason`` in the summary."""

    def __init__(self, message: str, kind: str | None = None):
        super().__init__(message)
        self.kind = kind or message


def _parse_python(code: str, field: str) -> None:
    try:
        parse_python(code)
    except SyntaxError as exc:
        raise Reject(field, f"not valid Python: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # e.g. source contains null bytes
        raise Reject(field, f"not valid Python: {exc}") from None


def parse_kodcode_record(obj) -> dict:
    """Validate one KodCode record; return the fields the DHRCL rows need."""
    if not isinstance(obj, dict):
        raise Reject("(json)", f"expected a JSON object, got {type(obj).__name__}")
    for key in ("question_id", "question", "solution"):
        if key not in obj:
            raise Reject(key, "missing")
    qid = check_text(obj["question_id"], "question_id")
    question = check_text(obj["question"], "question")
    solution = check_text(obj["solution"], "solution")
    tkey = "test_code" if "test_code" in obj else "test" if "test" in obj else None
    if tkey is None:
        raise Reject("test_code", "missing (neither test_code nor test)")
    test_code = check_text(obj[tkey], tkey)
    _parse_python(solution, "solution")
    _parse_python(test_code, tkey)
    test_info = obj.get("test_info")
    test_defs = set(top_level_names(test_code))
    if test_info is not None:
        if not isinstance(test_info, list):
            raise Reject("test_info", f"expected a list or null, got {type(test_info).__name__}")
        for i, t in enumerate(test_info):
            if not isinstance(t, dict):
                raise Reject(f"test_info[{i}]", f"expected an object, got {type(t).__name__}")
            if "function_name" not in t:
                raise Reject(f"test_info[{i}].function_name", "missing")
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
        raise Filtered(
            "no entry point: test_info is null and the tests use no name of the reference solution "
            "that they do not define themselves",
            kind="no entry point",
        )
    own = [n for n in entry_points if n in test_defs]
    if own and not imports_solution(test_code):
        raise Filtered(
            f"the tests define the entry point(s) {own} themselves, so they cannot check an answer",
            kind="tests define the entry point",
        )
    return {
        "question_id": qid,
        "question": question,
        "solution": solution,
        "test_code": test_code,
        "entry_points": entry_points,
        "tests_import_solution": imports_solution(test_code),
        "prompt": build_prompt(question, test_info, entry_points, imports_solution(test_code)),
    }


def iter_json_array(path: Path) -> Iterator[tuple[int, object]]:
    """Yield ``(line_number, element)`` for each element of a top-level JSON array, tracking line numbers."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            path, raw[: exc.start].count(b"\n") + 1, "(file)", f"not valid UTF-8 (byte {exc.start})"
        ) from None
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
    """``(line, parsed object or Reject, raw snippet)`` for a .json array file or a JSONL file."""
    if path.suffix == ".json":
        for line, obj in iter_json_array(path):
            yield line, obj, None
        return
    for line, raw, size in iter_raw_lines(path, max_line_bytes):
        if raw is None:
            yield line, Reject("(line)", f"line is {size} bytes, over max_line_bytes={max_line_bytes}"), None
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield line, Reject("(line)", f"not valid UTF-8 (byte {exc.start})"), raw
            continue
        if not text.strip():
            yield line, Reject("(line)", "blank line"), raw
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            obj = Reject("(json)", f"invalid JSON: {exc.msg} at column {exc.colno}")
        except RecursionError:
            obj = Reject("(json)", "JSON nested too deeply")
        yield line, obj, raw

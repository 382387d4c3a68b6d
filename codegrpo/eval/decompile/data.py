"""SK²Decompile evaluation sets: the two schemas, loaders and the URL cache (codegrpo.eval.decompile)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence


log = logging.getLogger(__name__)


LEVELS = ("O0", "O1", "O2", "O3")
SKELETON_PROMPT = "# This is the assembly code:\n{code}\n# What is the source code?\n"
SKIN_PROMPT = "# This is the normalized code:\n{code}\n# What is the source code?\n"
HE_FIELDS = ("task_id", "type", "c_func", "c_test", "input_asm_prompt")
# SK²Decompile's evaluation files (Decompile-Bench-Eval rows; sk2decompile/evaluation/data/*_normsrcpseudo.json)
NSP_FIELDS = ("index", "func_name", "func_dep", "func", "test", "opt", "language", "ida_pseudo", "ghidra_pseudo")
PROTOCOLS = ("sk2decompile", "llm4decompile")
C_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EvalDataError(ValueError):
    """A benchmark file is malformed; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class DecompileTask:
    task_id: int
    opt: str
    c_func: str
    c_test: str
    pseudo: str  # model input: input_asm_prompt (legacy files) or the configured field (normsrcpseudo files)
    func_name: str = "func0"
    func_dep: str | None = None  # normsrcpseudo: the gold function's dependencies (None: c_func's includes)
    decompiled: tuple[tuple[str, str], ...] = ()  # normsrcpseudo: (("ida", ida_pseudo), ("ghidra", ...))
    input_field: str = "input_asm_prompt"  # the row field ``pseudo`` was read from

    @property
    def key(self) -> str:
        return f"{self.task_id}_{self.opt}"


def load_humaneval_decompile(
    path: str | os.PathLike, levels: Sequence[str] = LEVELS, tasks_per_level: int | None = None
) -> list[DecompileTask]:
    """Read a HumanEval-Decompile JSON file (a list of objects with ``HE_FIELDS``).

    ``tasks_per_level`` keeps the first N task ids of each level (the CPU default evaluates a subset).
    """
    path = Path(path)
    data = _read_json_list(path)
    tasks: list[DecompileTask] = []
    for i, row in enumerate(data):
        _check_row(path, i, row, HE_FIELDS, ("type", "c_func", "c_test", "input_asm_prompt"))
        task_id = _level_and_id(path, i, row, "type", "task_id")
        if row["type"] in levels:
            tasks.append(DecompileTask(task_id, row["type"], row["c_func"], row["c_test"], row["input_asm_prompt"]))
    return _first_per_level(tasks, levels, tasks_per_level)


def _read_json_list(path: Path):
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise EvalDataError(f"{path}: line {exc.lineno}: not valid JSON: {exc.msg}") from exc
    if not isinstance(data, list):
        raise EvalDataError(f"{path}: expected a JSON list of tasks, got {type(data).__name__}")
    return data


def _check_row(
    path: Path, i: int, row, fields: Sequence[str], strings: Sequence[str], notes: Mapping[str, str] | None = None
) -> None:
    """Entry ``i`` of ``path`` is an object with every field of ``fields`` (a missing one named, with its note from
    ``notes``) and a string in every field of ``strings``; else EvalDataError naming the file, entry and field."""
    if not isinstance(row, dict):
        raise EvalDataError(f"{path}: entry {i}: expected an object, got {type(row).__name__}")
    for field in fields:
        if field not in row:
            raise EvalDataError(f"{path}: entry {i}: missing field {field!r}{(notes or {}).get(field, '')}")
    for field in strings:
        if not isinstance(row[field], str):
            raise EvalDataError(f"{path}: entry {i}: field {field!r} must be a string")


def _level_and_id(path: Path, i: int, row: Mapping, level_field: str, id_field: str) -> int:
    """Entry ``i``'s optimisation level (``level_field``, one of LEVELS) checked, and its integer ``id_field``."""
    if row[level_field] not in LEVELS:
        raise EvalDataError(
            f"{path}: entry {i}: field {level_field!r} is {row[level_field]!r}, expected one of {LEVELS}"
        )
    try:
        return int(row[id_field])
    except (TypeError, ValueError) as exc:
        raise EvalDataError(f"{path}: entry {i}: field {id_field!r} is not an integer: {row[id_field]!r}") from exc


def _first_per_level(tasks: list[DecompileTask], levels: Sequence[str], n: int | None) -> list[DecompileTask]:
    if n is None:
        return tasks
    keep: list[DecompileTask] = []
    for level in levels:
        ids = set(sorted({t.task_id for t in tasks if t.opt == level})[:n])
        keep.extend(t for t in tasks if t.opt == level and t.task_id in ids)
    return keep


def load_normsrcpseudo(
    path: str | os.PathLike,
    levels: Sequence[str] = LEVELS,
    tasks_per_level: int | None = None,
    language: str = "c",
    input_field: str = "ida_pseudo",
) -> list[DecompileTask]:
    """Read an SK²Decompile evaluation file (``humaneval_normsrcpseudo.json`` / ``mbpp_normsrcpseudo.json``).

    A JSON list of objects with ``NSP_FIELDS`` (extra fields such as ``ida_pseudo_norm`` or ``asm`` are
    ignored). Rows of another ``language`` are skipped, as ``evaluate_exe.py`` selects ``language == 'c'``.
    The model input is the row's ``input_field`` (the reference protocol: ``ida_pseudo_norm``, given to the
    model as is; the legacy path: ``ida_pseudo``, normalised by this project's normaliser at inference); a row
    without it is an error naming the file, the entry and the field. The raw ``ida_pseudo`` /
    ``ghidra_pseudo`` are the decompiler baseline rows.
    """
    path = Path(path)
    tasks: list[DecompileTask] = []
    notes = {} if input_field in NSP_FIELDS else {input_field: " (the configured model input field)"}
    for i, row in enumerate(_read_json_list(path)):
        _check_row(path, i, row, (*NSP_FIELDS, input_field), (*NSP_FIELDS[1:], input_field), notes)
        if row["language"] != language:
            continue
        index = _level_and_id(path, i, row, "opt", "index")
        if not C_NAME_RE.match(row["func_name"]):
            raise EvalDataError(f"{path}: entry {i}: field 'func_name' is not a C identifier: {row['func_name']!r}")
        if row["opt"] in levels:
            tasks.append(
                DecompileTask(
                    index,
                    row["opt"],
                    row["func"],
                    row["test"],
                    row[input_field],
                    func_name=row["func_name"],
                    func_dep=row["func_dep"],
                    decompiled=(("ida", row["ida_pseudo"]), ("ghidra", row["ghidra_pseudo"])),
                    input_field=input_field,
                )
            )
    return _first_per_level(tasks, levels, tasks_per_level)


def fetch_eval_file(
    source: str | os.PathLike, cache_dir: str | os.PathLike | None = None, timeout: float = 120.0
) -> Path:
    """A local path for ``source``: the path itself, or an http(s) URL's copy in ``cache_dir`` (default: the run's
    URL cache, :func:`codegrpo.hub.fetch_url`), downloaded there once unless the job runs offline."""
    from codegrpo.hub import HubError, fetch_url

    text = str(source)
    if not text.startswith(("http://", "https://")):
        path = Path(text)
        if not path.is_file():
            raise FileNotFoundError(f"evaluation set {path} does not exist")
        return path
    try:
        return fetch_url(text, cache_dir, timeout=timeout)
    except HubError as exc:
        raise EvalDataError(str(exc)) from exc


def file_sha256(source: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """sha256 of the evaluation file actually read (the cached download for a URL), for the result's provenance."""
    h = hashlib.sha256()
    with open(fetch_eval_file(source, cache_dir), "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def detect_schema(path: str | os.PathLike) -> str:
    """``normsrcpseudo`` or ``humaneval_legacy``, from the first entry's fields."""
    path = Path(path)
    data = _read_json_list(path)
    first = data[0] if data and isinstance(data[0], dict) else {}
    if "func_dep" in first:
        return "normsrcpseudo"
    if "c_func" in first:
        return "humaneval_legacy"
    raise EvalDataError(
        f"{path}: entry 0: neither the normsrcpseudo fields {NSP_FIELDS} nor the HumanEval-Decompile fields {HE_FIELDS}"
    )


def load_eval_set(
    source: str | os.PathLike,
    levels: Sequence[str] = LEVELS,
    tasks_per_level: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    input_field: str | None = None,
) -> list[DecompileTask]:
    """Load either schema from a path or URL (see ``load_normsrcpseudo`` / ``load_humaneval_decompile``).

    ``input_field``: the model input field every row must have (None: the schema's legacy default, ``ida_pseudo``
    or ``input_asm_prompt``). A requested level without tasks is an error naming the file and the level.
    """
    path = fetch_eval_file(source, cache_dir)
    if detect_schema(path) == "normsrcpseudo":
        tasks = load_normsrcpseudo(path, levels, tasks_per_level, input_field=input_field or "ida_pseudo")
    else:
        if input_field not in (None, "input_asm_prompt"):
            raise EvalDataError(
                f"{path}: the configured model input field {input_field!r} is not in this file "
                f"(a legacy HumanEval-Decompile file: task_id, type, c_func, c_test, "
                f"input_asm_prompt); the reference protocol reads the normsrcpseudo files"
            )
        tasks = load_humaneval_decompile(path, levels, tasks_per_level)
    present = {t.opt for t in tasks}
    empty = [lv for lv in levels if lv not in present]
    if empty:
        raise EvalDataError(
            f"{path}: no tasks at level(s) {', '.join(empty)} (language c); the configured levels are {list(levels)}"
        )
    return tasks


def check_eval_set(
    source: str | os.PathLike,
    protocol: str,
    input_field: str | None,
    levels: Sequence[str] = LEVELS,
    what: str = "evaluate.decompile",
) -> None:
    """Plan-time check of a local evaluation file (a URL is checked by its job before any model loads): readable,
    every row with the model input field the protocol reads, every configured level with tasks. Raises
    EvalDataError naming the file, the field or level, and the config section."""
    if str(source).startswith(("http://", "https://")):
        return
    try:
        load_eval_set(source, levels, input_field=input_field if protocol == "sk2decompile" else None)
    except (EvalDataError, FileNotFoundError) as exc:
        raise EvalDataError(f"{what}: {exc}") from exc

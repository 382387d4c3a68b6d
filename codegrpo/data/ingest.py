"""Line-by-line ingestion and validation of the configured JSONL datasets.

Two input shapes are understood (``shape`` in a dataset's config):

* ``verl``: rows already in verl's RL layout, as in ``sk2decompile-rl-examples.jsonl``:
  ``data_source``, ``prompt`` (one user message whose content is a known prompt wrapper around the input code),
  ``ability``, ``reward_model`` (``style``, ``ground_truth``), ``extra_info`` (``index``, ``split``, ``header``).
* ``raw``: one object per line with the input code, the target and optionally a header and an id, under field
  names given in the config (``fields``). The input may be wrapped in a known prompt (``unwrap``), as in the
  alpaca-style SFT example files (``input`` = ``"# This is the pseudo code:\\n...\\n# What is the source code?\\n"``).

Every line is checked. A bad line raises :class:`DataError` naming the file, the line number and the field
(``on_bad_record: error``) or becomes a :class:`BadRecord` in ``rejects.jsonl`` (``on_bad_record: quarantine``),
counted in the summary. Nothing is dropped silently.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator

from codegrpo.contracts import LEGACY_DATA_SOURCE_ALIASES, STAGE_DATA_SOURCE
from codegrpo.io import atomic_group, write_json, write_jsonl

log = logging.getLogger(__name__)

# The prompt wrappers of SK2Decompile (spec section 1.1). The same tuples build prompts (parquet) and strip
# them from wrapped inputs (ingest).
PROMPT_WRAPPERS: dict[str, tuple[str, str]] = {
    "assembly": ("# This is the assembly code:\n", "\n# What is the source code?\n"),
    "pseudo": ("# This is the pseudo code:\n", "\n# What is the source code?\n"),
    "normalized": ("# This is the normalized code:\n", "\n# What is the source code?\n"),
}

# Canonical reward-routing keys per stage (codegrpo.contracts.STAGE_DATA_SOURCE). Inputs may use an alias listed in
# config data.data_source_aliases (default: codegrpo.contracts.LEGACY_DATA_SOURCE_ALIASES).

DEFAULT_MAX_LINE_BYTES = 1 << 20


def wrap_prompt(kind: str, code: str) -> str:
    """The exact SK2Decompile prompt: prefix + code.strip() + suffix."""
    prefix, suffix = PROMPT_WRAPPERS[kind]
    return prefix + code.strip() + suffix


def unwrap_prompt(kind: str, text: str) -> str | None:
    """The code inside a wrapped prompt, or None when ``text`` is not wrapped by ``kind``."""
    prefix, suffix = PROMPT_WRAPPERS[kind]
    if len(text) < len(prefix) + len(suffix) or not text.startswith(prefix) or not text.endswith(suffix):
        return None
    return text[len(prefix) : len(text) - len(suffix)]


class DataError(ValueError):
    """A bad input record; the message names the file, the line (1-based) and the field."""

    def __init__(self, file: str | os.PathLike, line: int, field: str, reason: str):
        self.file = str(file)
        self.line = line
        self.field = field
        self.reason = reason
        super().__init__(f"{self.file}:{line}: field '{field}': {reason}")


@dataclasses.dataclass
class BadRecord:
    file: str
    line: int
    field: str
    reason: str
    raw: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class Reject(Exception):
    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field = field
        self.reason = reason


def iter_raw_lines(path: str | os.PathLike, max_line_bytes: int) -> Iterator[tuple[int, bytes | None, int]]:
    """Yield ``(line_number, bytes_without_newline | None, size)``; None marks a line over ``max_line_bytes``.

    An oversized line is consumed without being held in memory. A final line without a newline counts.
    """
    with open(path, "rb") as fh:
        lineno = 0
        while True:
            chunk = fh.readline(max_line_bytes + 1)
            if not chunk:
                return
            lineno += 1
            if chunk.endswith(b"\n"):
                yield lineno, chunk[:-1].rstrip(b"\r"), len(chunk) - 1
                continue
            if len(chunk) <= max_line_bytes:  # last line, no trailing newline
                yield lineno, chunk, len(chunk)
                continue
            size = len(chunk)
            while chunk and not chunk.endswith(b"\n"):
                chunk = fh.readline(1 << 16)
                size += len(chunk)
            yield lineno, None, size - (1 if chunk.endswith(b"\n") else 0)


def check_text(value: Any, field: str, *, required: bool = True, allow_empty: bool = False) -> str | None:
    """Validate a string field: type, emptiness, encodability as UTF-8 and no NUL characters."""
    if value is None:
        if required:
            raise Reject(field, "missing (null)")
        return None
    if not isinstance(value, str):
        raise Reject(field, f"expected a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise Reject(field, "empty string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Reject(field, f"not encodable as UTF-8 (lone surrogate at position {exc.start})") from None
    if "\x00" in value:
        raise Reject(field, "contains a NUL character")
    return value


def _need(obj: dict, key: str, field: str) -> Any:
    if key not in obj:
        raise Reject(field, "missing")
    return obj[key]


def _need_dict(obj: dict, key: str, field: str) -> dict:
    value = _need(obj, key, field)
    if not isinstance(value, dict):
        raise Reject(field, f"expected an object, got {type(value).__name__}")
    return value


def _id_value(value: Any, field: str) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise Reject(field, f"expected an integer or a string id, got {type(value).__name__}")
    if isinstance(value, str):
        check_text(value, field)
    return value


def parse_verl_record(obj: dict, ds: dict, aliases: dict[str, str]) -> dict:
    """Validate one verl-shaped row and return the canonical record fields."""
    stage = ds["stage"]
    want = STAGE_DATA_SOURCE[stage]
    data_source = check_text(_need(obj, "data_source", "data_source"), "data_source")
    canonical = aliases.get(data_source, data_source)
    if canonical != want:
        raise Reject("data_source", f"{data_source!r} is not {want!r} (or an alias of it) for stage {stage!r}")
    prompt = _need(obj, "prompt", "prompt")
    if not isinstance(prompt, list) or len(prompt) != 1:
        raise Reject("prompt", "expected a list of exactly one chat message")
    msg = prompt[0]
    if not isinstance(msg, dict):
        raise Reject("prompt[0]", f"expected an object, got {type(msg).__name__}")
    if msg.get("role") != "user":
        raise Reject("prompt[0].role", f"expected 'user', got {msg.get('role')!r}")
    content = check_text(_need(msg, "content", "prompt[0].content"), "prompt[0].content")
    wrapper = ds.get("unwrap") or "assembly"
    code = unwrap_prompt(wrapper, content)
    if code is None:
        raise Reject("prompt[0].content", f"not wrapped in the {wrapper!r} prompt ({PROMPT_WRAPPERS[wrapper][0]!r})")
    check_text(code, "prompt[0].content")
    check_text(_need(obj, "ability", "ability"), "ability")
    rm = _need_dict(obj, "reward_model", "reward_model")
    check_text(_need(rm, "style", "reward_model.style"), "reward_model.style")
    target = check_text(_need(rm, "ground_truth", "reward_model.ground_truth"), "reward_model.ground_truth")
    ei = _need_dict(obj, "extra_info", "extra_info")
    index = _need(ei, "index", "extra_info.index")
    if isinstance(index, bool) or not isinstance(index, int):
        raise Reject("extra_info.index", f"expected an integer, got {type(index).__name__}")
    if "split" in ei:
        check_text(ei["split"], "extra_info.split")
    header = check_text(ei.get("header"), "extra_info.header", required=False, allow_empty=True)
    return {
        "id": str(index),
        "index": index,
        "id_field": "extra_info.index",
        "input": code,
        "target": target,
        "header": header,
        "data_source_in": data_source,
    }


def source_split(obj: dict, shape: str) -> str:
    """The train/val side a row's producer assigned (``use_source_split``): ``extra_info.split`` of a verl row,
    ``provenance.split`` of a raw row."""
    outer, field = ("extra_info", "extra_info.split") if shape == "verl" else ("provenance", "provenance.split")
    holder = obj.get(outer)
    split = holder.get("split") if isinstance(holder, dict) else None
    if split not in ("train", "val"):
        raise Reject(field, f"use_source_split: expected 'train' or 'val', got {split!r}")
    return split


def parse_raw_record(obj: dict, ds: dict, lineno: int) -> dict:
    """Validate one raw row (configured field names) and return the canonical record fields."""
    fields = ds["fields"]
    in_key, tgt_key = fields["input"], fields["target"]
    text = check_text(_need(obj, in_key, in_key), in_key)
    wrapper = ds.get("unwrap")
    if wrapper:
        code = unwrap_prompt(wrapper, text)
        if code is None:
            raise Reject(in_key, f"not wrapped in the {wrapper!r} prompt ({PROMPT_WRAPPERS[wrapper][0]!r})")
        text = check_text(code, in_key)
    target = check_text(_need(obj, tgt_key, tgt_key), tgt_key)
    header = None
    if fields.get("header"):
        header = check_text(obj.get(fields["header"]), fields["header"], required=False, allow_empty=True)
    id_key = fields.get("id")
    if id_key:
        value = _id_value(_need(obj, id_key, id_key), id_key)
        index = value if isinstance(value, int) else lineno
        rid = str(value)
    else:
        index, rid = lineno, str(lineno)
    return {
        "id": rid,
        "index": index,
        "id_field": id_key or "(line)",
        "input": text,
        "target": target,
        "header": header,
    }


@dataclasses.dataclass
class IngestResult:
    records: list[dict]
    rejects: list[BadRecord]
    summary: dict


def ingest_dataset(
    name: str,
    ds: dict,
    *,
    on_bad_record: str = "error",
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    aliases: dict[str, str] | None = None,
) -> IngestResult:
    """Read and validate every line of one dataset (``ds`` is its config entry)."""
    if on_bad_record not in ("error", "quarantine"):
        raise ValueError(f"on_bad_record must be 'error' or 'quarantine', got {on_bad_record!r}")
    aliases = dict(LEGACY_DATA_SOURCE_ALIASES if aliases is None else aliases)
    path = Path(ds["path"])
    if not path.is_file():
        raise FileNotFoundError(f"dataset {name!r}: input file {path} does not exist")
    shape = ds["shape"]
    records: list[dict] = []
    rejects: list[BadRecord] = []
    seen: dict[str, int] = {}
    n_lines = 0

    for lineno, raw, size in iter_raw_lines(path, max_line_bytes):
        n_lines += 1
        try:
            if raw is None:
                raise Reject("(line)", f"line is {size} bytes, over max_line_bytes={max_line_bytes}")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise Reject("(line)", f"not valid UTF-8 (byte {exc.start})") from None
            if not text.strip():
                raise Reject("(line)", "blank line")
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise Reject("(json)", f"invalid JSON: {exc.msg} at column {exc.colno}") from None
            except RecursionError:
                raise Reject("(json)", "JSON nested too deeply") from None
            if not isinstance(obj, dict):
                raise Reject("(json)", f"expected a JSON object, got {type(obj).__name__}")
            rec = parse_verl_record(obj, ds, aliases) if shape == "verl" else parse_raw_record(obj, ds, lineno)
            if ds.get("use_source_split"):
                rec["split"] = source_split(obj, shape)
            if rec["id"] in seen:
                raise Reject(rec["id_field"], f"duplicate id {rec['id']!r} (first on line {seen[rec['id']]})")
            seen[rec["id"]] = lineno
        except Reject as rej:
            if on_bad_record == "error":
                raise DataError(path, lineno, rej.field, rej.reason) from None
            snippet = "" if raw is None else raw[:200].decode("utf-8", errors="replace")
            rejects.append(BadRecord(str(path), lineno, rej.field, rej.reason, snippet))
            log.warning("%s:%d: field '%s': %s (quarantined)", path, lineno, rej.field, rej.reason)
            continue
        rec.pop("id_field")
        rec.update(
            {
                "dataset": name,
                "stage": ds["stage"],
                "data_source": STAGE_DATA_SOURCE[ds["stage"]],
                "source_file": str(path),
                "source_line": lineno,
            }
        )
        records.append(rec)

    if not records:
        raise DataError(path, n_lines, "(file)", "no valid record in the file")
    summary = {
        "dataset": name,
        "path": str(path),
        "shape": shape,
        "stage": ds["stage"],
        "on_bad_record": on_bad_record,
        "lines": n_lines,
        "accepted": len(records),
        "rejected": len(rejects),
        "rejected_by_field": _count(r.field for r in rejects),
    }
    log.info("ingest %s: %d lines, %d accepted, %d rejected", name, n_lines, len(records), len(rejects))
    return IngestResult(records, rejects, summary)


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for it in items:
        out[it] = out.get(it, 0) + 1
    return out


def write_ingest_outputs(result: IngestResult, records_path, rejects_path, summary_path) -> None:
    """Write records, rejects and the summary atomically, as one unit (all three or none)."""
    with atomic_group():
        write_jsonl(records_path, result.records)
        write_jsonl(rejects_path, (r.to_json() for r in result.rejects))
        write_json(summary_path, result.summary)


def ingest_to_files(name: str, ds: dict, *, records_path, rejects_path, summary_path, **kwargs) -> dict:
    """Ingest one dataset and write its three outputs; on a bad record in error mode nothing is written."""
    result = ingest_dataset(name, ds, **kwargs)
    write_ingest_outputs(result, records_path, rejects_path, summary_path)
    return result.summary


def load_source_rows(src: dict, what: str) -> tuple[str, list[dict]]:
    """``(name, rows)`` of a configured dataset source, the same code for the Hub and a local copy: ``src`` has
    ``hub_id`` (+ ``split``, default train, and ``cache_dir``) or ``path`` (a local Parquet / JSONL / JSON file,
    read through the same ``datasets`` call), and optionally ``limit`` (first N rows). ``what`` names the source
    in errors."""
    import datasets

    if src.get("path"):
        path = Path(src["path"])
        if not path.is_file():
            raise FileNotFoundError(f"{path}: {what} file not found")
        builder = "parquet" if path.suffix == ".parquet" else "json"
        ds = datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=src.get("cache_dir"))
        name = str(path)
    else:
        ds = datasets.load_dataset(src["hub_id"], split=src.get("split") or "train", cache_dir=src.get("cache_dir"))
        name = src["hub_id"]
    if src.get("limit"):
        ds = ds.select(range(min(int(src["limit"]), len(ds))))
    return name, [dict(r) for r in ds]

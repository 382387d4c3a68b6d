"""verl parquet writers (RL and SFT) and the deterministic train/val split.

RL rows follow verl 0.4.1's RL schema (verl.md 3.1): ``data_source`` (str), ``prompt`` (one user message),
``ability`` (str), ``reward_model`` (``style``, ``ground_truth``), ``extra_info`` (``index``, ``split`` and
stage-specific keys). SFT rows have the two string columns ``prompt`` and ``response`` read by verl's
``fsdp_sft_trainer`` (``data.prompt_key=prompt``, ``data.response_key=response``).

Every file is written with an explicit Arrow schema, so train and val files of a stage always have identical
column types (a header that is null in every row of one split still has type string), and atomically.

Prompts (spec sk2decompile.md 1.1):
  skeleton (RL, inference):  "# This is the assembly code:\\n" + pseudo_norm.strip() + "\\n# What is the source code?\\n"
  skin (SFT, RL, inference): "# This is the normalized code:\\n" + IR.strip() + "\\n# What is the source code?\\n"
The upstream skeleton SFT example file says "pseudo code" instead of "assembly code"; the SFT wording is the
config key ``data.skeleton_sft_prompt`` (default ``assembly``, so SFT, RL and inference see the same prompt).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from codegrpo.contracts import STAGE_DATA_SOURCE
from codegrpo.data.ingest import wrap_prompt
from codegrpo.io import atomic_group, atomic_path, read_jsonl

log = logging.getLogger(__name__)

STAGE_PROMPT = {"skeleton": "assembly", "skin": "normalized"}
ABILITY = {"skeleton": "decompile", "skin": "decompile"}

PROMPT_TYPE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
REWARD_MODEL_TYPE = pa.struct([("style", pa.string()), ("ground_truth", pa.string())])


def _extra_info(**fields: pa.DataType) -> pa.StructType:
    """An ``extra_info`` struct: the row's ``index`` and ``split``, then the data set's own ``fields`` in order."""
    return pa.struct([("index", pa.int64()), ("split", pa.string()), *fields.items()])


_STR = pa.string()
EXTRA_INFO_TYPES = {
    "skeleton": _extra_info(dataset=_STR, header=_STR, header_status=_STR),
    "skin": _extra_info(dataset=_STR),
    "kodcode": _extra_info(
        question_id=_STR,
        reference_solution=_STR,
        test_code=_STR,
        entry_points=pa.list_(_STR),
        tests_import_solution=pa.bool_(),
        question=_STR,  # the reward model's user turn (DHRCL baseline_acecoder)
    ),
}

SFT_SCHEMA = pa.schema([("prompt", pa.string()), ("response", pa.string())])


def rl_schema(kind: str) -> pa.Schema:
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", PROMPT_TYPE),
            ("ability", pa.string()),
            ("reward_model", REWARD_MODEL_TYPE),
            ("extra_info", EXTRA_INFO_TYPES[kind]),
        ]
    )


def hash_unit(key: str, seed: int) -> float:
    """A deterministic number in [0, 1) from ``key`` and ``seed`` (SHA-256, independent of PYTHONHASHSEED)."""
    digest = hashlib.sha256(f"{seed}:{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_slices(keys: Iterable[str], fractions: dict[str, float], seed: int, rest: str = "train") -> dict[str, str]:
    """Assign each key to a slice by its hash: the slices in ``fractions`` take consecutive hash ranges, the
    remainder goes to ``rest``. Each slice gets at least one key when there are enough keys (the keys of
    ``rest`` with the smallest hash move over), and ``rest`` keeps at least one."""
    keys = list(dict.fromkeys(keys))
    names = list(fractions)
    if len(keys) < len(names) + 1:
        raise ValueError(f"{len(keys)} records cannot fill the slices {names + [rest]} (need at least one each)")
    units = {k: hash_unit(k, seed) for k in keys}
    out: dict[str, str] = {}
    for k in keys:
        lo = 0.0
        out[k] = rest
        for name in names:
            hi = lo + fractions[name]
            if lo <= units[k] < hi:
                out[k] = name
                break
            lo = hi
    for name in names:
        if not any(v == name for v in out.values()):
            donors = sorted((k for k in keys if out[k] == rest), key=lambda k: units[k])
            out[donors[0]] = name
    if not any(v == rest for v in out.values()):
        # Every key hashed into a named slice: move the largest-hash key of the biggest slice back.
        biggest = max(names, key=lambda n: sum(1 for v in out.values() if v == n))
        donor = max((k for k in keys if out[k] == biggest), key=lambda k: units[k])
        out[donor] = rest
    return out


def split_key(rec: dict) -> str:
    return f"{rec['dataset']}:{rec['id']}"


def assign_train_val(records: list[dict], val_fraction: float, seed: int) -> dict[str, str]:
    """train/val per record key: the split a record brought from its file (``use_source_split``), else a hash of
    its key; hashing keeps both sides non-empty."""
    out = {split_key(r): r["split"] for r in records if r.get("split") in ("train", "val")}
    rest = [r for r in records if split_key(r) not in out]
    if rest:
        out.update(assign_slices((split_key(r) for r in rest), {"val": val_fraction}, seed))
    return out


def rl_row(rec: dict, stage: str, split: str) -> dict:
    extra = {"index": int(rec["index"]), "split": split, "dataset": rec["dataset"]}
    if stage == "skeleton":
        extra.update(header=rec.get("header"), header_status=rec.get("header_status"))
    return {
        "data_source": STAGE_DATA_SOURCE[stage],
        "prompt": [{"role": "user", "content": wrap_prompt(STAGE_PROMPT[stage], rec["input"])}],
        "ability": ABILITY[stage],
        "reward_model": {"style": "rule", "ground_truth": rec["target"]},
        "extra_info": extra,
    }


def sft_row(rec: dict, stage: str, skeleton_prompt: str = "assembly") -> dict:
    kind = skeleton_prompt if stage == "skeleton" else STAGE_PROMPT[stage]
    return {"prompt": wrap_prompt(kind, rec["input"]), "response": rec["target"]}


def write_table(rows: list[dict], schema: pa.Schema, dest) -> None:
    table = pa.Table.from_pylist(rows, schema=schema)
    with atomic_path(dest, suffix=".parquet") as tmp:
        pq.write_table(table, tmp)


def load_stage_records(paths: Iterable[str], stage: str) -> list[dict]:
    records: list[dict] = []
    for p in paths:
        for rec in read_jsonl(p):
            if rec["stage"] != stage:
                raise ValueError(f"{p}: record {rec['id']} has stage {rec['stage']!r}, expected {stage!r}")
            records.append(rec)
    return records


def write_stage_parquets(
    record_files: list[str],
    *,
    stage: str,
    role: str,
    train_path,
    val_path,
    val_fraction: float,
    seed: int,
    skeleton_sft_prompt: str = "assembly",
) -> dict:
    """Build one stage's train/val parquet pair (``role`` = ``rl`` or ``sft``) from validated records."""
    if stage not in STAGE_DATA_SOURCE:
        raise ValueError(f"unknown stage {stage!r}")
    records = load_stage_records(record_files, stage)
    if not records:
        raise ValueError(f"no records for stage {stage!r} in {record_files}")
    splits = assign_train_val(records, val_fraction, seed)
    parts: dict[str, list[dict]] = {"train": [], "val": []}
    for rec in records:
        split = splits[split_key(rec)]
        if role == "rl":
            parts[split].append(rl_row(rec, stage, split))
        elif role == "sft":
            parts[split].append(sft_row(rec, stage, skeleton_sft_prompt))
        else:
            raise ValueError(f"unknown role {role!r}")
    schema = rl_schema(stage) if role == "rl" else SFT_SCHEMA
    with atomic_group():  # the train/val pair appears together or not at all
        write_table(parts["train"], schema, train_path)
        write_table(parts["val"], schema, val_path)
    summary = {
        "stage": stage,
        "role": role,
        "train": len(parts["train"]),
        "val": len(parts["val"]),
        "sources": list(record_files),
    }
    log.info("%s %s parquet: %d train, %d val", stage, role, summary["train"], summary["val"])
    return summary

"""SK²Decompile training-data generation from (pseudo-code, source) pairs (spec sk2decompile.md §4, §7).

Input: LLM4Decompile's ``decompile-ghidra-100k`` (``instruction`` = Ghidra pseudo-code prompt, ``output`` =
source) by hub id through ``datasets``, or any local JSONL / JSON / Parquet file with configured field names
(loaded through the same ``datasets`` call). Steps, each counted in ``summary.json``:

1. ``normalize``: the pseudo-code normaliser of the data stage (:func:`codegrpo.data.normalize.normalize_pseudo`);
2. ``obfuscate``: source → IR (:mod:`codegrpo.data.obfuscate`), keeping the names the normalised pseudo-code shows;
3. ``format``: comment removal + clang-format + blank lines dropped, for the IR and for the source;
4. ``headers``: Psyche-C infers the header of the IR; ``validate``: header + IR must pass ``gcc -fsyntax-only``;
5. ``dedup`` (normalised IR, or the (pseudo-code, IR) pair), ``decontaminate`` (normalised function bodies of the evaluation sets), ``split``.

Outputs (shapes of the shipped example files, so the existing data stages ingest them unchanged):
``sft_pseudo2ir.jsonl`` and ``sft_ir2src.jsonl`` (alpaca: instruction / input / output), ``rl_skeleton.jsonl``
and ``rl_skin.jsonl`` (verl rows; the skeleton rows carry ``extra_info.header``). Every record carries its
provenance (source dataset, row id, optimisation level) in ``provenance`` / ``extra_info.provenance``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

from codegrpo.contracts import STAGE_DATA_SOURCE
from codegrpo.data.headers import PsycheC, gcc_syntax_check
from codegrpo.data.ingest import PROMPT_WRAPPERS, DataError, load_source_rows, unwrap_prompt, wrap_prompt
from codegrpo.data.normalize import (
    ClangFormatError,
    clang_format,
    drop_blank_lines,
    find_clang_format,
    normalize_pseudo,
    remove_comments,
)
from codegrpo.data.obfuscate import obfuscate, visible_names
from codegrpo.io import atomic_group, atomic_open, write_json, write_jsonl

log = logging.getLogger(__name__)

OUTPUTS = ("sft_pseudo2ir", "sft_ir2src", "rl_skeleton", "rl_skin")
_OPT = re.compile(r"\bO[0-3s]\b")


def load_rows(src: dict) -> tuple[list[dict], str]:
    """Rows of the configured source and its name. ``src``: ``hub_id`` (+ ``split``, ``cache_dir``) or ``path``."""
    name, rows = load_source_rows(src, "generation source")
    return rows, name


def _unwrap_any(text: str) -> str:
    for kind in PROMPT_WRAPPERS:
        code = unwrap_prompt(kind, text)
        if code is not None:
            return code
    return text


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b.*$", re.MULTILINE)


def strip_includes(code: str) -> str:
    """Sources in the releases start with their #include lines; the training targets (and Psyche-C) have none."""
    return _INCLUDE.sub("", code)


def format_code(code: str, exe: str, timeout: float, style: str) -> str:
    return drop_blank_lines(clang_format(strip_includes(remove_comments(code)), exe, timeout, style)).strip()


def body_key(code: str) -> str:
    """Normalised function body for dedup / decontamination: comments, preprocessor lines and whitespace gone."""
    text = remove_comments(code)
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    i = text.find("{")
    body = text[i:] if i >= 0 else text
    return hashlib.sha256(re.sub(r"\s+", "", body).encode("utf8")).hexdigest()


def eval_keys(paths: list[dict]) -> tuple[set[str], dict[str, int]]:
    """Body keys of the evaluation sets (each entry: ``path`` of a JSON array / JSONL and its code ``field``)."""
    keys: set[str] = set()
    counts: dict[str, int] = {}
    for ent in paths:
        path = Path(ent["path"])
        text = path.read_text(encoding="utf8")
        try:
            rows = (
                json.loads(text)
                if text.lstrip().startswith("[")
                else [json.loads(ln) for ln in text.splitlines() if ln.strip()]
            )
        except json.JSONDecodeError as exc:
            raise DataError(path, exc.lineno, "(json)", f"not JSON ({exc.msg})") from None
        n = 0
        for i, r in enumerate(rows):
            code = r.get(ent["field"]) if isinstance(r, dict) else None
            if not isinstance(code, str):
                raise DataError(path, i + 1, ent["field"], "missing or not text")
            keys.add(body_key(code))
            n += 1
        counts[str(path)] = n
    return keys, counts


def _unit(key: str, seed: int) -> float:
    return int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def _split(key: str, seed: int, val_fraction: float) -> str:
    return "val" if _unit(key, seed) < val_fraction else "train"


def _ensure_both_sides(kept: list[dict], seed: int, val_fraction: float) -> None:
    """With at least two records and ``val_fraction`` > 0, neither side may be empty (the data stages keep this
    split, and training needs both): the record whose hash is nearest the threshold changes side."""
    if len(kept) < 2 or val_fraction <= 0:
        return
    for empty, _other in (("val", "train"), ("train", "val")):
        if not any(r["split"] == empty for r in kept):
            pick = (min if empty == "val" else max)(kept, key=lambda r: _unit(r["_split_key"], seed))
            pick["split"] = empty


STEP_ORDER = ("read", "normalize", "obfuscate", "format", "headers", "validate", "dedup", "decontaminate")
_ROW_STEPS = ("read", "normalize", "obfuscate", "format", "headers", "validate")


def _row_steps(
    i: int,
    row: dict,
    fields: dict,
    source_name: str,
    psychec: PsycheC,
    exe: str,
    clang_format_timeout: float,
    style: str,
    gcc: str,
    gcc_timeout: float,
) -> tuple[dict | None, tuple]:
    """The per-row steps (read … validate) of one row: ``(record, ())`` or ``(None, (step, reason))``."""
    pseudo_f, src_f, opt_f, id_f = fields["pseudo"], fields["source"], fields.get("opt"), fields.get("id")
    pseudo, source = row.get(pseudo_f), row.get(src_f)
    if not isinstance(pseudo, str) or not isinstance(source, str) or not pseudo.strip() or not source.strip():
        return None, ("read", f"field {pseudo_f!r} or {src_f!r} missing or empty")
    rid = row.get(id_f) if id_f else i
    opt = row.get(opt_f) if opt_f else None
    if opt is None:  # decompile-ghidra-100k has no level field; its prompts do not name one either
        m = _OPT.search(str(row.get("type", "")))
        opt = m.group(0) if m else None
    prov = {"source": source_name, "row": rid, "opt": opt}

    norm, why = normalize_pseudo(_unwrap_any(pseudo), exe=exe, timeout=clang_format_timeout, style=style)
    if norm is None:
        return None, ("normalize", why.split(":")[0] if "clang-format" in why else re.sub(r"\d+", "N", why))
    try:
        ir_raw, mapping = obfuscate(strip_includes(remove_comments(source)), visible_names(norm))
    except (UnicodeError, ValueError) as exc:
        return None, ("obfuscate", type(exc).__name__)
    try:
        ir = format_code(ir_raw, exe, clang_format_timeout, style)
        src = format_code(source, exe, clang_format_timeout, style)
    except ClangFormatError as exc:
        return None, ("format", str(exc).split(":")[0])
    header = psychec.generate(ir)
    if header is None:
        return None, ("headers", psychec.failure_reason(ir) or "Psyche-C failed")
    ok, err = gcc_syntax_check(header, ir, gcc=gcc, timeout=gcc_timeout)
    if not ok:
        return None, ("validate", "gcc timeout" if "timed out" in err else "gcc error")
    return {
        "pseudo": norm,
        "ir": ir,
        "source": src,
        "raw_source": source,
        "header": header,
        "provenance": prov,
        "renamed": len(mapping),
    }, ()


def generate(
    rows: list[dict],
    *,
    source_name: str,
    fields: dict,
    psychec: PsycheC,
    clang_format_path=None,
    clang_format_timeout: float = 5.0,
    style: str = "Google",
    gcc: str = "gcc",
    gcc_timeout: float = 10.0,
    contamination: set[str] = frozenset(),
    val_fraction: float = 0.1,
    seed: int = 0,
    dedup: str = "ir",
    workers: int = 1,
) -> tuple[dict[str, list[dict]], dict]:
    """Run all steps on ``rows``; return the four output lists and the summary (counts per step and reason).

    ``dedup``: ``ir`` keeps one record per normalised IR (the same function compiled at several optimisation
    levels gives one record); ``pseudo_ir`` keeps one per (pseudo-code, IR) pair, so every level's pseudo-code
    of a function stays a skeleton example. ``workers``: threads for the per-row steps (each runs external
    tools: clang-format, Psyche-C, gcc); dedup, decontamination and the outputs follow the input order, so the
    result does not depend on ``workers``."""
    import concurrent.futures as cf
    import time

    from tqdm import tqdm

    if dedup not in ("ir", "pseudo_ir"):
        raise ValueError(f"dedup must be 'ir' or 'pseudo_ir', got {dedup!r}")
    t0 = time.monotonic()
    exe = find_clang_format(clang_format_path)
    steps = {s: {"in": 0, "kept": 0, "dropped_by_reason": {}} for s in STEP_ORDER}

    def drop(step, reason):
        d = steps[step]["dropped_by_reason"]
        d[reason] = d.get(reason, 0) + 1

    args = (fields, source_name, psychec, exe, clang_format_timeout, style, gcc, gcc_timeout)
    with cf.ThreadPoolExecutor(max_workers=max(1, int(workers))) as pool:
        results = list(
            tqdm(
                pool.map(lambda ir: _row_steps(ir[0], ir[1], *args), enumerate(rows)),
                total=len(rows),
                desc="generate",
                unit="row",
                mininterval=5.0,
                disable=None,
            )
        )
    kept: list[dict] = []
    seen: set[str] = set()
    for rec, failure in results:
        for step in _ROW_STEPS:
            steps[step]["in"] += 1
            if failure and failure[0] == step:
                drop(step, failure[1])
                break
            steps[step]["kept"] += 1
        if rec is None:
            continue
        steps["dedup"]["in"] += 1
        key = body_key(rec["ir"]) if dedup == "ir" else body_key(rec["pseudo"]) + body_key(rec["ir"])
        if key in seen:
            drop("dedup", "duplicate IR" if dedup == "ir" else "duplicate (pseudo-code, IR) pair")
            continue
        seen.add(key)
        steps["dedup"]["kept"] += 1
        steps["decontaminate"]["in"] += 1
        if body_key(rec.pop("raw_source")) in contamination or body_key(rec["source"]) in contamination:
            drop("decontaminate", "function body in an evaluation set")
            continue
        steps["decontaminate"]["kept"] += 1
        rec["split"] = _split(key, seed, val_fraction)
        rec["_split_key"] = key
        kept.append(rec)

    _ensure_both_sides(kept, seed, val_fraction)
    out: dict[str, list[dict]] = {k: [] for k in OUTPUTS}
    for idx, r in enumerate(kept):
        prov = dict(r["provenance"], split=r["split"])
        out["sft_pseudo2ir"].append(
            {
                "instruction": "",
                "input": wrap_prompt("pseudo", r["pseudo"]),
                "output": r["ir"],
                "system": "",
                "provenance": prov,
            }
        )
        out["sft_ir2src"].append(
            {
                "instruction": "",
                "input": wrap_prompt("normalized", r["ir"]),
                "output": r["source"],
                "system": "",
                "provenance": prov,
            }
        )
        out["rl_skeleton"].append(
            {
                "data_source": STAGE_DATA_SOURCE["skeleton"],
                "prompt": [{"content": wrap_prompt("assembly", r["pseudo"]), "role": "user"}],
                "ability": "decompile",
                "reward_model": {"ground_truth": r["ir"], "style": "rule"},
                "extra_info": {"index": idx, "split": r["split"], "header": r["header"], "provenance": prov},
            }
        )
        out["rl_skin"].append(
            {
                "data_source": STAGE_DATA_SOURCE["skin"],
                "prompt": [{"content": wrap_prompt("normalized", r["ir"]), "role": "user"}],
                "ability": "decompile",
                "reward_model": {"ground_truth": r["source"], "style": "rule"},
                "extra_info": {"index": idx, "split": r["split"], "header": None, "provenance": prov},
            }
        )
    for s in steps.values():
        s["dropped"] = sum(s["dropped_by_reason"].values())
    summary = {
        "source": source_name,
        "rows": len(rows),
        "records": len(kept),
        "steps": steps,
        "splits": {sp: sum(1 for r in kept if r["split"] == sp) for sp in ("train", "val")},
        "psyche_c": psychec.describe(),
        "outputs": {k: len(v) for k, v in out.items()},
        "dedup": dedup,
        "workers": max(1, int(workers)),
        "seconds": round(time.monotonic() - t0, 3),
    }
    log.info("generate: %d rows -> %d records (%s)", len(rows), len(kept), {k: v["dropped"] for k, v in steps.items()})
    return out, summary


def steps_html(summary: dict) -> str:
    """The per-step counts of ``summary`` as a small HTML page (embedded in the Snakemake report)."""
    from html import escape

    rows = []
    for name in STEP_ORDER:
        st = summary["steps"][name]
        reasons = "; ".join(f"{escape(r)}: {n}" for r, n in sorted(st["dropped_by_reason"].items())) or "-"
        rows.append(
            f"<tr><td>{name}</td><td>{st['in']}</td><td>{st['kept']}</td><td>{st['dropped']}</td>"
            f"<td>{reasons}</td></tr>"
        )
    psy = summary.get("psyche_c", {})
    fails = "; ".join(f"{escape(r)}: {n}" for r, n in sorted((psy.get("failures") or {}).items())) or "none"
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>SK2Decompile data generation</title></head>"
        f"<body><h3>Data generation from {escape(str(summary['source']))}</h3>"
        f"<p>{summary['rows']} rows read, {summary['records']} records written "
        f"(train {summary['splits']['train']}, val {summary['splits']['val']}).</p>"
        "<table border='1'><tr><th>step</th><th>in</th><th>kept</th><th>dropped</th><th>dropped by reason</th></tr>"
        + "".join(rows)
        + "</table>"
        f"<p>Psyche-C: {'used' if psy.get('available') else 'not available'}, {psy.get('runs', 0)} runs, "
        f"timeout {psy.get('timeout_s')} s per step; failures by reason: {fails}.</p></body></html>\n"
    )


def write_outputs(out: dict[str, list[dict]], summary: dict, out_dir, html_path=None) -> None:
    out_dir = Path(out_dir)
    with atomic_group():
        for k in OUTPUTS:
            write_jsonl(out_dir / f"{k}.jsonl", out[k])
        if html_path is not None:
            with atomic_open(html_path) as fh:
                fh.write(steps_html(summary))
        write_json(out_dir / "summary.json", summary)


# How the data stages read the four generated files (config ``data.sk2d_inputs: generated``): one dataset
# entry each, in the shape of the config's ``datasets`` section (schemas/config.schema.yaml).
GENERATED_DATASETS = {
    "rl_skeleton": {
        "shape": "verl",
        "stage": "skeleton",
        "roles": ["rl"],
        "unwrap": "assembly",
        "normalize": False,
        "check_headers": True,
    },
    "sft_pseudo2ir": {
        "shape": "raw",
        "stage": "skeleton",
        "roles": ["sft"],
        "unwrap": "pseudo",
        "normalize": False,
        "check_headers": False,
    },
    "rl_skin": {
        "shape": "verl",
        "stage": "skin",
        "roles": ["rl"],
        "unwrap": "normalized",
        "normalize": False,
        "check_headers": False,
    },
    "sft_ir2src": {
        "shape": "raw",
        "stage": "skin",
        "roles": ["sft"],
        "unwrap": "normalized",
        "normalize": False,
        "check_headers": False,
    },
}


def generated_datasets(out_dir) -> dict[str, dict]:
    """Dataset entries ``generated_<output>`` whose ``path`` is ``<out_dir>/<output>.jsonl``.

    The pseudo-code is already normalised by generation (``normalize: false``); only the skeleton RL rows
    need their header checked by gcc again (the reward compiles it); the SFT rows carry no header. Each record
    keeps the split generation gave its function (``use_source_split``), so that a function is on the same side
    of the train/val split in all four training sets.
    """
    fields = {"input": "input", "target": "output", "header": None, "id": None}
    return {
        f"generated_{k}": dict(v, path=str(Path(out_dir) / f"{k}.jsonl"), fields=dict(fields), use_source_split=True)
        for k, v in GENERATED_DATASETS.items()
    }


def generate_from_config(
    gen_cfg: dict, *, normalize_cfg: dict, headers_cfg: dict, seed: int, out_dir, html_path=None, workers: int = 1
) -> dict:
    """Load the configured source (``data.generate``), run every step and write the outputs; return the summary."""
    src = gen_cfg["source"]
    if not src.get("path") and not src.get("hub_id"):
        raise ValueError("data.generate.source: set hub_id or path")
    rows, name = load_rows(src)
    contamination, counts = eval_keys(gen_cfg["decontaminate"])
    psychec = PsycheC(
        headers_cfg.get("psychecgen"),
        headers_cfg.get("psychecsolver"),
        timeout=gen_cfg["psychec_timeout"],
        bin_dir=gen_cfg.get("psychec_bin"),
    )
    require_psychec(psychec, gen_cfg.get("psychec_bin"))
    out, summary = generate(
        rows,
        source_name=name,
        fields=gen_cfg["fields"],
        psychec=psychec,
        clang_format_path=normalize_cfg.get("clang_format"),
        clang_format_timeout=normalize_cfg["clang_format_timeout"],
        style=normalize_cfg["clang_format_style"],
        gcc=headers_cfg["gcc"],
        gcc_timeout=headers_cfg["gcc_timeout"],
        contamination=contamination,
        val_fraction=gen_cfg["val_fraction"],
        seed=seed,
        dedup=gen_cfg["dedup"],
        workers=workers,
    )
    summary["decontamination_sets"] = counts
    if not summary["records"]:
        # an empty training set is never what a run wants: fail here, naming why every row went, instead of
        # succeeding empty and failing later in data_parquet ("no records for stage ...")
        reasons = {st: v["dropped_by_reason"] for st, v in summary["steps"].items() if v["dropped_by_reason"]}
        raise ValueError(
            f"data.generate: every one of the {len(rows)} rows of {name} was dropped, nothing written "
            f"to {out_dir}; dropped by step and reason: {json.dumps(reasons, sort_keys=True)}"
        )
    write_outputs(out, summary, out_dir, html_path=html_path)
    return summary


def require_psychec(psychec: PsycheC, bin_dir) -> None:
    """Generation needs Psyche-C (every record's header comes from it): refuse to start without it."""
    if psychec.available:
        return
    raise FileNotFoundError(
        f"data.generate needs Psyche-C (psychecgen and psychecsolver-exe), not found in data.generate.psychec_bin "
        f"({bin_dir!r}), data.headers.psychecgen / psychecsolver or on PATH. Build it once per checkout: "
        f"`git clone -b original https://github.com/ltcmelo/psychec <src>` and "
        f"`bash scripts/build_psychec.sh <src> build/psychec` (docs/cluster.md, 'Psyche-C')"
    )

"""Ingest: the shipped datasets, and a suite of malformed inputs in error and quarantine mode."""

from __future__ import annotations

from tests.conftest import REPO_ROOT
import json
from pathlib import Path

import pytest

from codegrpo.config import load_config
from codegrpo.data.ingest import DataError, ingest_dataset, ingest_to_files, iter_raw_lines, unwrap_prompt, wrap_prompt

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "data"

VERL = {"shape": "verl", "stage": "skeleton", "unwrap": "assembly"}
RAW_P2N = {
    "shape": "raw",
    "stage": "skeleton",
    "unwrap": "pseudo",
    "fields": {"input": "input", "target": "output", "header": None, "id": None},
}

# fixture -> (dataset config, line of the bad record, field named in the error, words in the reason)
BAD_LINES = {
    "invalid_json.jsonl": (VERL, 3, "(json)", "invalid JSON"),
    "not_an_object.jsonl": (VERL, 3, "(json)", "expected a JSON object"),
    "missing_field.jsonl": (VERL, 3, "reward_model", "missing"),
    "mistyped_index.jsonl": (VERL, 3, "extra_info.index", "expected an integer"),
    "bool_index.jsonl": (VERL, 3, "extra_info.index", "expected an integer"),
    "non_utf8.jsonl": (VERL, 3, "(line)", "not valid UTF-8"),
    "oversized_line.jsonl": (VERL, 3, "(line)", "over max_line_bytes"),
    "duplicate_id.jsonl": (VERL, 3, "extra_info.index", "duplicate id '1' (first on line 1)"),
    "empty_ground_truth.jsonl": (VERL, 3, "reward_model.ground_truth", "empty string"),
    "unwrapped_prompt.jsonl": (VERL, 3, "prompt[0].content", "not wrapped"),
    "blank_line.jsonl": (VERL, 3, "(line)", "blank line"),
    "lone_surrogate.jsonl": (VERL, 3, "prompt[0].content", "lone surrogate"),
    "wrong_data_source.jsonl": (VERL, 3, "data_source", "'gsm8k' is not 'sk2decompile_structure'"),
    "nul_character.jsonl": (VERL, 3, "reward_model.ground_truth", "NUL"),
    "header_wrong_type.jsonl": (VERL, 3, "extra_info.header", "expected a string, got int"),
    "two_messages.jsonl": (VERL, 3, "prompt", "exactly one chat message"),
    "raw_missing_input.jsonl": (RAW_P2N, 3, "input", "missing"),
    "raw_mistyped_output.jsonl": (RAW_P2N, 3, "output", "expected a string, got list"),
}
MAX_LINE_BYTES = 4096  # the oversized fixture line is ~7 kB, the good lines ~1 kB


def _outputs(tmp_path: Path) -> dict:
    return {
        "records_path": tmp_path / "out" / "ingested.jsonl",
        "rejects_path": tmp_path / "out" / "rejects.jsonl",
        "summary_path": tmp_path / "out" / "summary.json",
    }


def test_shipped_rl_file(data_dir):
    res = ingest_dataset("rl", dict(VERL, path=str(data_dir / "sk2decompile/sk2decompile-rl-examples.jsonl")))
    assert res.summary["lines"] == 100 and res.summary["accepted"] == 100 and not res.rejects
    by_id = {r["index"]: r for r in res.records}
    assert by_id[87208]["header"] is None
    assert sum(r["header"] is not None for r in res.records) == 99
    # the legacy routing key is mapped to the canonical one
    assert {r["data_source_in"] for r in res.records} == {"llm4decompile_exe"}
    assert {r["data_source"] for r in res.records} == {"sk2decompile_structure"}
    r = by_id[5723]
    assert r["input"].startswith("int printLine(char a1, int a2) {") and r["input"].endswith("return putchar(10);\n}")
    assert wrap_prompt("assembly", r["input"]) == (
        "# This is the assembly code:\n" + r["input"] + "\n# What is the source code?\n"
    )


def test_shipped_raw_files(data_dir):
    p2n = ingest_dataset("p2n", dict(RAW_P2N, path=str(data_dir / "sk2decompile/pseudo2norm-examples.jsonl")))
    assert p2n.summary["accepted"] == 20
    assert p2n.records[0]["input"].startswith("long long sub_4E05(long long a1) {")
    assert p2n.records[0]["target"].startswith("type1* func1(type2* var1) {")
    assert [r["index"] for r in p2n.records] == list(range(1, 21))  # line numbers are the ids
    n2c = ingest_dataset(
        "n2c",
        {
            "shape": "raw",
            "stage": "skin",
            "unwrap": "normalized",
            "path": str(data_dir / "sk2decompile/norm2code-examples.jsonl"),
            "fields": {"input": "input", "target": "output", "header": None, "id": None},
        },
    )
    assert n2c.summary["accepted"] == 20
    assert n2c.records[0]["input"].startswith("static bool func1(struct type1 *var1")
    assert {r["data_source"] for r in n2c.records} == {"sk2decompile_identifier"}


def test_wrong_wrapper_is_rejected(data_dir):
    ds = dict(RAW_P2N, unwrap="assembly", path=str(data_dir / "sk2decompile/pseudo2norm-examples.jsonl"))
    with pytest.raises(DataError) as exc:
        ingest_dataset("p2n", ds)
    assert exc.value.line == 1 and exc.value.field == "input"
    assert "pseudo2norm-examples.jsonl:1: field 'input'" in str(exc.value)


@pytest.mark.parametrize("fixture", sorted(BAD_LINES))
def test_bad_line_stops_with_file_line_field(fixture, tmp_path):
    ds_cfg, line, field, words = BAD_LINES[fixture]
    path = FIXTURES / fixture
    out = _outputs(tmp_path)
    with pytest.raises(DataError) as exc:
        ingest_to_files("fx", dict(ds_cfg, path=str(path)), on_bad_record="error", max_line_bytes=MAX_LINE_BYTES, **out)
    err = exc.value
    assert (err.file, err.line, err.field) == (str(path), line, field)
    msg = str(err)
    assert msg.startswith(f"{path}:{line}: field '{field}':"), msg
    assert words in msg, msg
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("fixture", sorted(BAD_LINES))
def test_bad_line_quarantined_and_counted(fixture, tmp_path):
    ds_cfg, line, field, words = BAD_LINES[fixture]
    path = FIXTURES / fixture
    out = _outputs(tmp_path)
    summary = ingest_to_files(
        "fx", dict(ds_cfg, path=str(path)), on_bad_record="quarantine", max_line_bytes=MAX_LINE_BYTES, **out
    )
    rejects = [json.loads(x) for x in out["rejects_path"].read_text().splitlines()]
    assert len(rejects) == 1
    assert (rejects[0]["file"], rejects[0]["line"], rejects[0]["field"]) == (str(path), line, field)
    assert words in rejects[0]["reason"]
    n_lines = len(path.read_bytes().rstrip(b"\n").split(b"\n"))
    assert summary["lines"] == n_lines
    assert summary["rejected"] == 1 and summary["accepted"] == n_lines - 1
    assert summary["rejected_by_field"] == {field: 1}
    records = out["records_path"].read_text().splitlines()
    assert len(records) == n_lines - 1
    assert json.loads(out["summary_path"].read_text()) == summary


def test_every_line_checked_many_bad_lines(tmp_path):
    """Several bad lines in one file: all are quarantined, the good ones kept, the counts add up."""
    lines = (FIXTURES / "missing_field.jsonl").read_bytes().split(b"\n")[:2]
    content = b"\n".join([lines[0], b"{oops", lines[1], b"", b"[1]", lines[0]]) + b"\n"
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(content)
    res = ingest_dataset("mixed", dict(VERL, path=str(path)), on_bad_record="quarantine")
    assert [(r.line, r.field) for r in res.rejects] == [
        (2, "(json)"),
        (4, "(line)"),
        (5, "(json)"),
        (6, "extra_info.index"),
    ]
    assert res.summary["accepted"] == 2 and res.summary["lines"] == 6


def test_deeply_nested_json_is_a_bad_record(tmp_path):
    good = (FIXTURES / "missing_field.jsonl").read_bytes().split(b"\n")[0]
    path = tmp_path / "deep.jsonl"
    path.write_bytes(good + b"\n" + b"[" * 100000 + b"]" * 100000 + b"\n")
    with pytest.raises(DataError) as exc:
        ingest_dataset("deep", dict(VERL, path=str(path)))
    assert (exc.value.line, exc.value.field) == (2, "(json)") and "nested too deeply" in str(exc.value)


def test_all_lines_bad_is_an_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{}\n[]\n")
    with pytest.raises(DataError, match="no valid record"):
        ingest_dataset("bad", dict(VERL, path=str(path)), on_bad_record="quarantine")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ingest_dataset("x", dict(VERL, path=str(tmp_path / "nope.jsonl")))


def test_raw_lines_reader_limits(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b"a" * 10 + b"\n" + b"b" * 11 + b"\n" + b"c" * 10)
    got = list(iter_raw_lines(p, 10))
    assert got == [(1, b"a" * 10, 10), (2, None, 11), (3, b"c" * 10, 10)]


def test_unwrap_roundtrip():
    assert unwrap_prompt("normalized", wrap_prompt("normalized", "  int x;\n")) == "int x;"
    assert unwrap_prompt("assembly", wrap_prompt("pseudo", "int x;")) is None


def test_config_datasets_ingest(repo_root, monkeypatch):
    """The default config's datasets ingest without error (paths relative to the repository)."""
    monkeypatch.chdir(repo_root)
    cfg = load_config(repo_root / "config.yaml")
    for name, ds in cfg["datasets"].items():
        res = ingest_dataset(
            name, ds, max_line_bytes=cfg["data"]["max_line_bytes"], aliases=cfg["data"]["data_source_aliases"]
        )
        assert res.summary["accepted"] == res.summary["lines"] > 0


def test_source_split_kept_and_checked(data_dir, tmp_path):
    """use_source_split: a raw row's provenance.split / a verl row's extra_info.split becomes the record's split;
    anything but train/val stops with file, line and field."""
    src = [json.loads(x) for x in (data_dir / "sk2decompile/pseudo2norm-examples.jsonl").read_text().splitlines()][:4]
    rows = [dict(r, provenance={"split": s}) for r, s in zip(src, ("train", "val", "train", "val"))]
    path = tmp_path / "raw.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = dict(RAW_P2N, path=str(path), use_source_split=True)
    assert [r["split"] for r in ingest_dataset("p", ds).records] == ["train", "val", "train", "val"]
    assert all("split" not in r for r in ingest_dataset("p", dict(ds, use_source_split=False)).records)
    rows[2]["provenance"]["split"] = "test"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as exc:
        ingest_dataset("p", ds)
    assert exc.value.line == 3 and exc.value.field == "provenance.split" and "'test'" in str(exc.value)
    verl = [json.loads(x) for x in (data_dir / "sk2decompile/sk2decompile-rl-examples.jsonl").read_text().splitlines()][
        :2
    ]
    verl[0]["extra_info"]["split"], verl[1]["extra_info"]["split"] = "val", "train"
    vpath = tmp_path / "verl.jsonl"
    vpath.write_text("".join(json.dumps(r) + "\n" for r in verl))
    recs = ingest_dataset("v", dict(VERL, path=str(vpath), use_source_split=True)).records
    assert [r["split"] for r in recs] == ["val", "train"]

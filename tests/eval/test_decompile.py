"""SK²Decompile evaluation: re-executability harness on the real HumanEval-Decompile data, gcc and the sandbox."""

from __future__ import annotations

import json
import os

import pytest

from codegrpo.eval import decompile as d
from tests.eval import MBPP_SAMPLE as MBPP

GHIDRA = "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"
OBJ = "data/sk2decompile/humaneval-decompile-v1-gcc-obj.json"
BRINGUP = "data/sk2decompile/bringupbench-merged.O0.func_map.infer.jsonl"


@pytest.fixture(scope="module")
def tasks(repo_root):
    return d.load_humaneval_decompile(repo_root / GHIDRA)


def _gold(tasks):
    return {t.key: d.split_includes(t.c_func)[1][0] for t in tasks}


def test_loader_reads_all_levels(tasks, repo_root):
    assert len(tasks) == 656
    assert {t.opt for t in tasks} == set(d.LEVELS)
    assert {t.task_id for t in tasks} == set(range(164))
    sub = d.load_humaneval_decompile(repo_root / OBJ, levels=("O0", "O3"), tasks_per_level=3)
    assert [(t.task_id, t.opt) for t in sub] == [(0, "O0"), (1, "O0"), (2, "O0"), (0, "O3"), (1, "O3"), (2, "O3")]


def test_loader_names_entry_and_field(tmp_path):
    bad = tmp_path / "bad.json"
    entry = {"task_id": 0, "type": "O0", "c_func": "", "c_test": "", "input_asm_prompt": ""}
    no_test = {k: v for k, v in entry.items() if k != "c_test"}
    for text, needle in (
        (json.dumps([entry, {**no_test, "task_id": 1}]), r"bad.json: entry 1: missing field 'c_test'"),
        (json.dumps([{**entry, "type": "O9"}]), r"entry 0: field 'type' is 'O9'"),
        ("[{", r"bad.json: line 1"),
    ):
        bad.write_text(text)
        with pytest.raises(d.EvalDataError, match=needle):
            d.load_humaneval_decompile(bad)


def test_both_loaders_check_rows_the_same_way(tmp_path):
    """One row check serves the legacy and the normsrcpseudo loaders: a non-object entry, a non-string field, a
    non-integer id and (normsrcpseudo) the configured input field, each named with the file and the entry."""
    bad = tmp_path / "bad.json"
    he = {"task_id": 0, "type": "O0", "c_func": "", "c_test": "", "input_asm_prompt": ""}
    nsp = {
        "index": 0,
        "func_name": "f",
        "func_dep": "",
        "func": "",
        "test": "",
        "opt": "O0",
        "language": "c",
        "ida_pseudo": "",
        "ghidra_pseudo": "",
    }
    cases = [
        (d.load_humaneval_decompile, [he, 3], r"bad.json: entry 1: expected an object, got int"),
        (d.load_humaneval_decompile, [dict(he, c_func=1)], r"entry 0: field 'c_func' must be a string"),
        (d.load_humaneval_decompile, [dict(he, task_id="x")], r"entry 0: field 'task_id' is not an integer: 'x'"),
        (d.load_normsrcpseudo, [nsp, []], r"bad.json: entry 1: expected an object, got list"),
        (d.load_normsrcpseudo, [dict(nsp, test=None)], r"entry 0: field 'test' must be a string"),
        (d.load_normsrcpseudo, [dict(nsp, index="y")], r"entry 0: field 'index' is not an integer: 'y'"),
    ]
    for load, rows, message in cases:
        bad.write_text(json.dumps(rows))
        with pytest.raises(d.EvalDataError, match=message):
            load(bad)
    bad.write_text(json.dumps([nsp]))
    with pytest.raises(
        d.EvalDataError,
        match=r"entry 0: missing field 'ida_pseudo_norm' \(the configured model "
        r"input field\)",
    ):
        d.load_normsrcpseudo(bad, input_field="ida_pseudo_norm")
    assert [t.task_id for t in d.load_normsrcpseudo(bad)] == [0]
    del nsp["ida_pseudo"]
    bad.write_text(json.dumps([nsp]))
    with pytest.raises(d.EvalDataError, match=r"entry 0: missing field 'ida_pseudo'$"):
        d.load_normsrcpseudo(bad, input_field="ida_pseudo")


def test_split_includes_collects_and_removes():
    inc, (f, t) = d.split_includes(
        "#include <stdio.h>\nint f(){return 1;}\n", "#include <assert.h>\n#include <stdio.h>\nint main(){}"
    )
    assert inc == ["#include <stdio.h>", "#include <assert.h>"]
    assert "#include" not in f and "#include" not in t
    only, full = d.build_programs(
        "int f(){return 1;}", "#include <math.h>\nint f();", "#include <assert.h>\nint main(){assert(f()==1);}"
    )
    assert only.startswith("#include <math.h>\n#include <assert.h>\n")
    assert full.index("int f(){return 1;}") < full.index("int main()")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("int foo(int a) { return a ? foo(a - 1) : 0; }", "int func0(int a) { return a ? func0(a - 1) : 0; }"),
        ("char *bar(char *s) { return s; }", "char *func0(char *s) { return s; }"),
        ("char **baz(void) { return 0; }", "char **func0(void) { return 0; }"),
        ("int func0(int a) { return a; }", "int func0(int a) { return a; }"),
        ("no parenthesis at all", "no parenthesis at all"),
        ("", ""),
        # the reference's plain substring replace also rewrites identifiers containing the name
        ("int f(int fx) { return fx; }", "int func0(int func0x) { return func0x; }"),
    ],
)
def test_restore_function_name(text, expected):
    assert d.restore_function_name(text, "func0") == expected


def test_gold_subset_passes_and_wrong_outputs_fail(tasks):
    sub = [t for t in tasks if t.task_id < 6]
    outputs = _gold(sub)
    # level O1: a wrong body (compiles, fails the asserts); O2: does not compile; O3: missing (empty output)
    for t in sub:
        if t.opt == "O1":
            outputs[t.key] = (
                "int func0() { return 0; }" if t.task_id % 2 else outputs[t.key].replace("return", "return 7 +", 1)
            )
        elif t.opt == "O2":
            outputs[t.key] = "int func0( { this is not C"
        elif t.opt == "O3":
            del outputs[t.key]
    res = d.reexecutability(sub, outputs, workers=2)
    assert res["reexec"]["O0"] == 100.0
    assert res["reexec"]["O2"] == 0.0 and res["compile"]["O2"] == 0.0
    assert res["reexec"]["O3"] == 0.0
    assert res["reexec"]["O1"] < 100.0
    assert res["reexec_avg"] == pytest.approx(sum(res["reexec"].values()) / 4)
    stages = {(r["opt"], r["stage"]) for r in res["records"]}
    assert ("O2", "compile_full") in stages and ("O0", "ok") in stages
    assert ("O3", "empty") in stages and res["compile"]["O3"] == 0.0  # a missing output is not "compilable"


def test_runaway_program_is_stopped(tasks):
    t = tasks[0]
    spin = "int func0(float *a, int n, float th) { volatile int x = 0; for (;;) x++; return 0; }"
    res = d.reexecutability([t], {t.key: spin}, timeout=1.0)
    rec = res["records"][0]
    assert rec["compiled"] and not rec["passed"] and rec["stage"] == "timeout"


def test_gold_subset_scores_100_at_every_level(repo_root):
    """Sanity (fast form): the first 40 tasks' own functions are re-executable at O0-O3."""
    sub = d.load_humaneval_decompile(repo_root / GHIDRA, tasks_per_level=40)
    res = d.reexecutability(sub, _gold(sub), workers=2)
    assert res["tasks_per_level"] == {lv: 40 for lv in d.LEVELS}
    assert res["reexec"] == {lv: 100.0 for lv in d.LEVELS} and res["compile_avg"] == 100.0
    assert res["hack_detected_total"] == 0  # the guards never fire on the benchmark's own functions


@pytest.mark.slow
def test_gold_functions_score_100_at_every_level(repo_root, tmp_path):
    """Sanity: the benchmark's own functions are re-executable on all 164 tasks at O0-O3."""
    out = tmp_path / "gold.json"
    res = d.run_baseline("gold", repo_root / GHIDRA, out, workers=2)
    assert res["tasks_per_level"] == {lv: 164 for lv in d.LEVELS}
    assert res["reexec"] == {lv: 100.0 for lv in d.LEVELS}
    saved = json.loads(out.read_text())
    assert saved["reexec_avg"] == 100.0 and len(saved["records"]) == 656
    assert {"model", "config_hash", "date"} <= set(saved["provenance"])


@pytest.mark.slow
def test_ghidra_baseline_is_low_and_falls_with_optimisation(repo_root, tmp_path):
    res = d.run_baseline("ghidra", repo_root / GHIDRA, tmp_path / "ghidra.json", workers=2)
    r = res["reexec"]
    assert 0.0 < res["reexec_avg"] < 50.0
    assert r["O0"] > r["O1"] >= r["O3"]
    # the LLM4Decompile paper reports raw Ghidra at 34.76 / 16.46 / 15.24 / 14.02 on the same benchmark
    for lv, published in zip(d.LEVELS, (34.76, 16.46, 15.24, 14.02)):
        assert abs(r[lv] - published) < 3.0


def test_normalizer_formats_ghidra_pseudo(tasks):
    norm = d.make_normalizer()
    out = norm(tasks[0].pseudo)
    assert out.startswith("undefined8 func0(float param_1, long param_2, int param_3)")
    assert "\n\n" not in out  # blank lines dropped
    prompt = d.skeleton_prompt(out)
    assert prompt.startswith("# This is the assembly code:\nundefined8 func0(")
    assert prompt.endswith("\n# What is the source code?\n")
    assert (
        d.skin_prompt("  int func0() {}\n")
        == "# This is the normalized code:\nint func0() {}\n# What is the source code?\n"
    )


def _tiny_system(name, model, eval_file, out, settings, **kw) -> dict:
    """``run_system`` with ``model`` for both phases on the transformers backend: one task per level, two workers,
    variant full; ``kw`` goes to ``run_system``."""
    kw = {"backend": "transformers", "tasks_per_level": 1, "workers": 2, "variant": "full", **kw}
    return d.run_system(name, model, model, eval_file, out, settings=settings, **kw)


@pytest.mark.slow
def test_two_phase_inference_with_tiny_model(repo_root, tmp_path):
    from codegrpo.eval.generate import GenerationSettings
    from codegrpo.models import build_tiny_model

    data = json.loads((repo_root / GHIDRA).read_text())
    model = build_tiny_model(
        tmp_path / "tiny", [x["c_func"] for x in data[:40]] + [x["input_asm_prompt"] for x in data[:40]], vocab_size=400
    )
    out = tmp_path / "eval" / "sys.json"
    settings = GenerationSettings(max_new_tokens=12, batch_size=4, use_chat_template=True)
    res = _tiny_system("tiny_two_phase", model, repo_root / GHIDRA, out, settings)
    saved = json.loads(out.read_text())
    assert saved["tasks_per_level"] == {lv: 1 for lv in d.LEVELS}
    assert saved["models"]["skin"] == str(model) and saved["backend"] == "transformers"
    assert saved["provenance"]["model"].startswith(str(model))
    for rec in saved["records"]:
        assert rec["input"].startswith("undefined")  # normalised Ghidra pseudo-code went in
        assert isinstance(rec["ir"], str) and isinstance(rec["output"], str)
    assert 0.0 <= res["reexec_avg"] <= 100.0


@pytest.mark.slow
def test_two_phase_on_the_mbpp_sample(repo_root, tmp_path, monkeypatch):
    """MBPP-Decompile (normsrcpseudo schema): IDA pseudo-code in, the sk2decompile protocol, the identifier metric
    with the configured (here: local MiniLM) embedding recorded in the result."""
    from codegrpo.eval.generate import GenerationSettings
    from codegrpo.models import build_tiny_model

    for k in [k for k in os.environ if k.startswith("CODEGRPO_EMBEDDING_")]:
        monkeypatch.delenv(k)
    rows = json.loads((repo_root / MBPP).read_text())
    model = build_tiny_model(
        tmp_path / "tiny", [r["func"] for r in rows] + [r["ida_pseudo"] for r in rows], vocab_size=300
    )
    out = tmp_path / "eval" / "sys" / "mbpp_decompile.json"
    from codegrpo.eval import sk2d_protocol as sk2d

    settings = GenerationSettings(max_new_tokens=8, batch_size=4, use_chat_template=False)
    res = _tiny_system(
        "sys",
        model,
        repo_root / MBPP,
        out,
        settings,
        identifier=True,
        embedding={"backend": "local"},
        benchmark="mbpp_decompile",
        protocol="sk2decompile",
        input_field="ida_pseudo_norm",
    )
    saved = json.loads(out.read_text())
    assert saved["benchmark"] == "mbpp_decompile" and saved["protocol"] == "sk2decompile"
    assert saved["tasks_per_level"] == {lv: 1 for lv in d.LEVELS} and "ida_pseudo_norm" in saved["input_note"]
    assert saved["input_field"] == "ida_pseudo_norm" and saved["chat_template"] is False
    by_key = {(r["index"], r["opt"]): r for r in rows}
    for rec in saved["records"]:  # what the reference's logs keep, the raw prompt (no template)
        row = by_key[(rec["task_id"], rec["opt"])]
        assert rec["prompt_model1"] == sk2d.phase1_prompt(row["ida_pseudo_norm"])
        assert rec["prompt_model2"] == sk2d.phase2_prompt(rec["gen_result_model1"])
        assert rec["final_result"] == sk2d.final_output(rec["gen_result_model2"], row["func_name"])
        assert rec["program"] == sk2d.assemble_program(row["func_dep"], rec["output"], row["test"])
    assert saved["identifier"]["n"] == 4 and saved["identifier"]["embedding"]["model"] == "all-MiniLM-L6-v2"
    assert 0.0 <= res["reexec_avg"] <= 100.0


@pytest.mark.slow
def test_identifier_metric_prefers_named_outputs(repo_root, tmp_path):
    """On BringUpBench, the skin model's named outputs score above the skeleton's placeholder IR."""
    res = d.run_bringupbench_identifier(
        repo_root / BRINGUP, tmp_path / "bub.json", limit=30, embedding={"backend": "local"}
    )
    s = res["scores"]
    assert s["reference infer-out-model2"]["n"] == 30
    assert s["reference infer-out-model2"]["mean"] > s["reference infer-out-model1"]["mean"] > 0.0


@pytest.mark.slow
def test_transformers_generator_greedy_and_sampling(repo_root, tmp_path):
    import torch

    from codegrpo.eval.generate import GenerationSettings, HFGenerator, make_generator
    from codegrpo.models import build_tiny_model

    data = json.loads((repo_root / GHIDRA).read_text())[:20]
    model = build_tiny_model(tmp_path / "tiny", [x["c_func"] for x in data], vocab_size=330, num_layers=1)
    prompts = [d.skeleton_prompt(x["input_asm_prompt"]) for x in data[:3]]
    greedy = make_generator(model, GenerationSettings(max_new_tokens=6, batch_size=2), backend="transformers")
    assert isinstance(greedy, HFGenerator) and greedy.device == "cpu"
    first, second = greedy.generate(prompts), greedy.generate(prompts[::-1])
    assert [len(x) for x in first] == [1, 1, 1]
    assert first == second[::-1]  # greedy: the same text whatever the batch composition
    sampler = HFGenerator(model, GenerationSettings(max_new_tokens=6, n=3, temperature=1.0, batch_size=2))
    samples = sampler.generate(prompts)
    assert [len(x) for x in samples] == [3, 3, 3]
    # the weights' dtype: float32 on CPU unless the settings name one (learning_real.eval.dtype: bfloat16)
    assert sampler.model.dtype == torch.float32
    half = HFGenerator(model, GenerationSettings(max_new_tokens=6, n=2, temperature=1.0, dtype="bfloat16"))
    assert half.model.dtype == torch.bfloat16
    assert [len(x) for x in half.generate(prompts)] == [2, 2, 2]
    with pytest.raises(ValueError, match="'float33' is not a torch dtype"):
        HFGenerator(model, GenerationSettings(dtype="float33"))
    with pytest.raises(ValueError, match="greedy decoding with n > 1"):
        HFGenerator(model, GenerationSettings(max_new_tokens=2, n=2)).generate(prompts[:1])
    with pytest.raises(FileNotFoundError, match="no config.json"):
        make_generator(tmp_path, GenerationSettings(), backend="transformers")


@pytest.mark.hostile
def test_hostile_outputs_are_contained(tasks, tmp_path):
    """Decompiled code runs in the sandbox: a fork bomb and a file write outside its folder do no harm."""
    t = tasks[0]
    marker = tmp_path / "escaped"
    fork_bomb = "#include <unistd.h>\nint func0(float *a, int n, float th) { for (;;) fork(); return 0; }"
    writer = (
        '#include <stdio.h>\nint func0(float *a, int n, float th) { FILE *f = fopen("'
        + str(marker)
        + '", "w"); if (f) { fputs("x", f); fclose(f); } return 1; }'
    )
    res = d.reexecutability([t], {t.key: fork_bomb}, timeout=2.0)
    assert not res["records"][0]["passed"]
    res = d.reexecutability([t], {t.key: writer}, timeout=2.0)
    assert res["records"][0]["compiled"]
    assert not marker.exists()


def test_parallel_and_serial_scoring_agree(tasks):
    sub = [t for t in tasks if t.task_id < 4]
    outputs = {t.key: t.pseudo for t in sub}  # raw Ghidra: a mix of passes and failures
    serial = d.reexecutability(sub, outputs, workers=1)
    parallel = d.reexecutability(sub, outputs, workers=3)
    key = lambda r: (r["task_id"], r["opt"], r["compiled"], r["passed"], r["stage"])  # noqa: E731
    assert [key(r) for r in serial["records"]] == [key(r) for r in parallel["records"]]
    assert serial["reexec"] == parallel["reexec"]

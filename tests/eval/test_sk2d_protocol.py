"""SK²Decompile's reference protocol (codegrpo.eval.sk2d_protocol) held against hand-checked reference behaviour.

Every expected string below was written by hand from reading the reference scripts (LLM4Decompile
@ 2169186d, albertan017/LLM4Decompile):

* ``sk2decompile/evaluation/sk2decompile_inf.py``: the phase-1 prompt (``before + sample[args.decompiler].strip()
  + after``, the block after ``inputs = []``), the phase-2 prompt (``before_recovery + sample.strip() +
  after_recovery``, built from the raw ``gen_results``), and the ``if args.strip:`` block (name = text before
  the first ``(``, ``split(' ')[-1].strip()``, one leading ``**`` or else ``*`` removed, ``one.replace(name,
  func_name)``), applied to the phase-2 output only;
* ``sk2decompile/evaluation/evaluate_exe.py`` ``get_score``: IDA / Ghidra rows first replace the raw token
  ``split('(')[0].split(' ')[-1]``; model rows are read back from the saved file; then every row goes through the
  same replacement loop as ``--strip``;
* ``sk2decompile/evaluation/metrics/cal_execute_rate.py`` ``execute_rate``: ``func_dep + "\\n" + func + "\\n" +
  func_test``, ``gcc -O0 file -o bin -lm`` (check, 10 s), run (check, 10 s).
"""

from __future__ import annotations

import json

import pytest

from codegrpo.eval import decompile as d
from codegrpo.eval import sk2d_protocol as sk2d
from tests.eval import MBPP_SAMPLE as MBPP, mbpp_gold


# ------------------------------------------------------------------------------------------ prompts


def test_phase1_prompt_strips_the_input_and_adds_the_reference_header_and_question():
    assert sk2d.phase1_prompt("  int f(int a1) {\n  return a1;\n}\n\n") == (
        "# This is the assembly code:\nint f(int a1) {\n  return a1;\n}\n# What is the source code?\n"
    )


def test_phase2_prompt_is_built_from_the_raw_phase1_generation():
    assert sk2d.phase2_prompt("\nint func1(int var1) {\n  return var1;\n}\n\n") == (
        "# This is the normalized code:\nint func1(int var1) {\n  return var1;\n}\n# What is the source code?\n"
    )


# ------------------------------------------------------------------------------------------ name restoration


@pytest.mark.parametrize(
    "text, name",
    [
        ("int func1(int var1)", "func1"),
        ("char *func1(char *s)", "func1"),  # `*name`: one star removed
        ("char **func1(int n)", "func1"),  # `**name`: two stars removed
        ("char ***f(void)", "*f"),  # only `**` is removed
        ("  int f(", "f"),
        ("static int\nfunc1(void)", "int\nfunc1"),  # split on single spaces only: the newline stays inside
        ("int\tfoo(int)", "int\tfoo"),
        ("int func1 (void)", ""),  # a space before `(`: the last piece is empty
        ("", ""),
        ("no parenthesis here", "here"),  # no `(`: the whole text's last piece
    ],
)
def test_generated_name_follows_the_reference_rule(text, name):
    assert sk2d.generated_name(text) == name


@pytest.mark.parametrize(
    "text, func_name, expected",
    [
        # every occurrence, names inside other identifiers and inside string literals too
        (
            "int func1(int var1) { return func1(var1 - 1) + func10; }",
            "fib",
            "int fib(int var1) { return fib(var1 - 1) + fib0; }",
        ),
        ('void func1(void) { puts("func1"); }', "f", 'void f(void) { puts("f"); }'),
        ("int *func1(int *var1) {\n  return var1;\n}", "get", "int *get(int *var1) {\n  return var1;\n}"),
        ("char **func1(char **var1) { return var1; }", "split", "char **split(char **var1) { return var1; }"),
        # an empty name: Python's str.replace('', x) puts x around every character (the reference does not guard)
        ("int f (x)", "g", "gigngtg gfg g(gxg)g"),
        ("", "f", "f"),
        ("int already(void) { return 0; }", "already", "int already(void) { return 0; }"),
    ],
)
def test_strip_name_is_a_plain_replace_of_the_generated_name(text, func_name, expected):
    assert sk2d.strip_name(text, func_name) == expected


def test_final_output_strips_only_when_asked():
    assert sk2d.final_output("int func1(void);", "f") == "int f(void);"
    assert sk2d.final_output("int func1(void);", "f", strip=False) == "int func1(void);"


def test_file_roundtrip_matches_a_real_text_mode_write_and_read(tmp_path):
    text = "int func1(void)\r\n{\r  return 0;\n}\r\n"
    path = tmp_path / "0_O0.c"
    with open(path, "w") as fh:  # as sk2decompile_inf.py saves, and evaluate_exe.py reads
        fh.write(text)
    with open(path) as fh:
        read = fh.read()
    assert sk2d.file_roundtrip(text) == read == "int func1(void)\n{\n  return 0;\n}\n"
    assert sk2d.evaluation_text(text, "g") == "int g(void)\n{\n  return 0;\n}\n"


def test_decompiler_rows_replace_the_raw_token_first():
    ida = "__int64 __fastcall sub_1149(int a1)\n{\n  return sub_1149(a1);\n}"
    assert sk2d.decompiler_text(ida, "fact") == "__int64 __fastcall fact(int a1)\n{\n  return fact(a1);\n}"
    # the raw token keeps its star, so the first replacement drops the pointer from the return type
    assert sk2d.decompiler_text("char *FUN_001(char *p) { return p; }", "f") == "char f(char *p) { return p; }"


def test_assemble_program():
    assert sk2d.assemble_program("#include <stdio.h>", "int f(void){return 0;}", "int main(void){return f();}") == (
        "#include <stdio.h>\nint f(void){return 0;}\nint main(void){return f();}"
    )


# ------------------------------------------------------------------------------------------ scoring on shipped data


def test_scoring_on_the_shipped_mbpp_sample(repo_root):
    tasks = d.load_eval_set(repo_root / MBPP, input_field="ida_pseudo_norm")
    rows = {(r["index"], r["opt"]): r for r in json.loads((repo_root / MBPP).read_text())}
    assert all(t.pseudo == rows[(t.task_id, t.opt)]["ida_pseudo_norm"] for t in tasks)
    o0 = [t for t in tasks if t.opt == "O0"]
    # candidates as a model would write them: a placeholder name (restored), a pointer-declared name, the gold
    outs = {}
    for t in o0:
        gold = rows[(t.task_id, "O0")]["func"]
        outs[t.key] = gold.replace(t.func_name, "func1")
    res = d.reexecutability(o0, outs, workers=2, protocol="sk2decompile")
    assert res["reexec"] == {"O0": 100.0}
    for t, rec in zip(o0, res["records"]):
        row = rows[(t.task_id, "O0")]
        assert rec["output"] == row["func"]
        assert rec["program"] == row["func_dep"] + "\n" + row["func"] + "\n" + row["test"]
        assert rec["compiled"] is True  # cal_execute_rate's flag_comp: the full program compiled
    # the tests can fail: a wrong body, and an empty output (compiled, as the reference does: it fails)
    bad = {t.key: rows[(t.task_id, "O0")]["func"].replace("return", "return 1 +", 1) for t in o0}
    bad[o0[0].key] = ""
    res = d.reexecutability(o0, bad, workers=2, protocol="sk2decompile")
    assert res["reexec"] == {"O0": 0.0}
    first = res["records"][0]
    assert first["output"] == o0[0].func_name and first["stage"] == "compile_full"


class _Recorder:
    """A deterministic stand-in for a model: answers each prompt with a fixed text and records the prompts
    (the wiring between the phases is what is tested; real models run in tests/eval/test_decompile.py)."""

    def __init__(self, answer):
        self.answer, self.prompts = answer, []

    def generate(self, prompts, desc=""):
        self.prompts.extend(prompts)
        return [[self.answer] for _ in prompts]


def test_two_phases_wire_raw_generations_and_restore_the_name_only_at_the_end(repo_root):
    tasks = d.load_eval_set(repo_root / MBPP, levels=("O0",), tasks_per_level=1, input_field="ida_pseudo_norm")
    t = tasks[0]
    skel = _Recorder("\nint func1(int *var1, int var2) { return func1(var1, var2); }\n")
    skin = _Recorder("int *func1(int *xs, int n) { return xs; }")
    out = d.sk2d_two_phase(tasks, skel, skin)[t.key]
    assert skel.prompts == [sk2d.PHASE1_HEAD + t.pseudo.strip() + sk2d.QUESTION] == [out["prompt_model1"]]
    # phase 2 sees phase 1's raw text: no name restoration in between
    assert (
        skin.prompts
        == [
            "# This is the normalized code:\nint func1(int *var1, int var2) { return func1(var1, "
            "var2); }\n# What is the source code?\n"
        ]
        == [out["prompt_model2"]]
    )
    assert out["gen_result_model1"] == skel.answer and out["gen_result_model2"] == skin.answer
    assert out["final_result"] == f"int *{t.func_name}(int *xs, int n) {{ return xs; }}"
    assert out["input_field"] == "ida_pseudo_norm"
    ir_only = d.sk2d_two_phase(tasks, skel, None)[t.key]
    assert ir_only["prompt_model2"] is None and ir_only["gen_result_model2"] is None
    # the raw generation, surrounding newlines kept (the reference saves the output unstripped)
    assert ir_only["final_result"] == (
        f"\nint {t.func_name}(int *var1, int var2) {{ return {t.func_name}(var1, var2); }}\n"
    )


# ------------------------------------------------------------------------------------------ bad input


def test_missing_input_field_and_empty_level_fail_before_any_model_loads(repo_root, tmp_path):
    rows = json.loads((repo_root / MBPP).read_text())
    no_field = tmp_path / "mbpp_normsrcpseudo.json"
    no_field.write_text(json.dumps([{k: v for k, v in r.items() if k != "ida_pseudo_norm"} for r in rows]))
    missing_model = tmp_path / "no-such-model"
    with pytest.raises(d.EvalDataError, match=r"mbpp_normsrcpseudo.json: entry 0: missing field 'ida_pseudo_norm'"):
        d.run_system(
            "s",
            missing_model,
            None,
            no_field,
            tmp_path / "out.json",
            settings=None,
            protocol="sk2decompile",
            input_field="ida_pseudo_norm",
        )
    with pytest.raises(d.EvalDataError, match=r"evaluate.decompile.mbpp: .*missing field 'ida_pseudo_norm'"):
        d.check_eval_set(no_field, "sk2decompile", "ida_pseudo_norm", what="evaluate.decompile.mbpp")
    d.check_eval_set(no_field, "llm4decompile", "ida_pseudo_norm")  # the legacy path does not read the field
    only_o0 = tmp_path / "o0.json"
    only_o0.write_text(json.dumps([r for r in rows if r["opt"] == "O0"]))
    with pytest.raises(d.EvalDataError, match=r"o0.json: no tasks at level\(s\) O1, O2, O3"):
        d.check_eval_set(only_o0, "sk2decompile", "ida_pseudo_norm")
    legacy = repo_root / "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"
    with pytest.raises(d.EvalDataError, match=r"field 'ida_pseudo_norm' is not in this file"):
        d.check_eval_set(legacy, "sk2decompile", "ida_pseudo_norm")
    assert not (tmp_path / "out.json").exists()


def test_result_records_the_evaluation_file_sha256(repo_root, tmp_path):
    import hashlib

    res = mbpp_gold(repo_root, tmp_path, tasks_per_level=1)
    assert res["data_sha256"] == hashlib.sha256((repo_root / MBPP).read_bytes()).hexdigest()
    assert res["reexec_avg"] == 100.0 and res["input_field"] is None

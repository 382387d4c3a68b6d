"""SK²Decompile's evaluation protocol as the reference scripts run it, as small pure functions.

Written from reading (not copying) LLM4Decompile ``sk2decompile/evaluation/sk2decompile_inf.py``,
``evaluate_exe.py`` and ``metrics/cal_execute_rate.py`` (albertan017/LLM4Decompile @ 2169186d; spec
../shared/spec/sk2decompile.md §5). The steps, in the reference's order:

1. phase-1 prompt: the configured input field of the evaluation row (``--decompiler``, default
   ``ida_pseudo_norm``), stripped, between the "assembly code" header and the question (:func:`phase1_prompt`);
   the raw string goes to vLLM (no chat template), greedy, ``max_tokens`` 4096, stop at the tokenizer's EOS;
2. phase-2 prompt: phase 1's raw generation, stripped, between the "normalized code" header and the question
   (:func:`phase2_prompt`) -- no name restoration in between;
3. ``--strip 1``: the final (phase-2) generation gets its function name replaced (:func:`strip_name`) and is
   written to ``<index>_<opt>.c``;
4. ``evaluate_exe.py`` reads that file back (text mode: :func:`file_roundtrip`), applies the same name
   replacement again (:func:`evaluation_text`), and ``cal_execute_rate.py`` compiles
   :func:`assemble_program` with ``gcc -O0 <file> -o <bin> -lm`` (10 s) and runs the binary (10 s): a task
   passes iff both succeed (exit status 0; the test is a ``main`` with C asserts) -- :data:`PASS_RULE`.

The IDA / Ghidra baseline rows of ``evaluate_exe.py`` replace the raw token before the first ``(`` first
(:func:`decompiler_text`), then apply the same replacement as model outputs.
"""

from __future__ import annotations

PHASE1_HEAD = "# This is the assembly code:\n"
PHASE2_HEAD = "# This is the normalized code:\n"
QUESTION = "\n# What is the source code?\n"
DEFAULT_INPUT_FIELD = "ida_pseudo_norm"  # sk2decompile_inf.py --decompiler default
MAX_NEW_TOKENS = 4096  # sk2decompile_inf.py --max_new_tokens default
# cal_execute_rate.py for language 'c' with a test: compile (10 s, check), then run (10 s, check)
COMPILE_ARGV = ("gcc", "-O0", "{src}", "-o", "{bin}", "-lm")
PASS_RULE = "gcc -O0 <func_dep + candidate + test> -o bin -lm (10 s) compiles and ./bin exits 0 within 10 s"


def phase1_prompt(model_input: str) -> str:
    """The structure-recovery prompt: ``before + sample[field].strip() + after`` (sk2decompile_inf.py)."""
    return PHASE1_HEAD + model_input.strip() + QUESTION


def phase2_prompt(phase1_generation: str) -> str:
    """The identifier-naming prompt built from phase 1's raw generation, stripped (sk2decompile_inf.py)."""
    return PHASE2_HEAD + phase1_generation.strip() + QUESTION


def generated_name(text: str) -> str:
    """The name the reference takes as the generated function's: the text before the first ``(``, its last
    piece when split on single spaces, whitespace-stripped at both ends, then one leading ``**`` or else one
    leading ``*`` removed. It can be empty (text starting with ``(``, ``name (``) or contain a newline
    (``int\\nfoo(`` gives ``int\\nfoo``) -- the reference does not guard either case."""
    name = text.split("(")[0].split(" ")[-1].strip()
    if name and name[:2] == "**":
        name = name[2:]
    elif name and name[0] == "*":
        name = name[1:]
    return name


def strip_name(text: str, func_name: str) -> str:
    """``--strip 1`` / evaluate_exe.py's loop: every occurrence of :func:`generated_name` in the text becomes
    ``func_name`` (a plain substring replace: identifiers containing the name change too; an empty name puts
    ``func_name`` between every two characters, as Python's ``str.replace('', x)`` does)."""
    return text.replace(generated_name(text), func_name)


def file_roundtrip(text: str) -> str:
    """What evaluate_exe.py reads back from the file sk2decompile_inf.py wrote (Python text mode on Linux:
    written as is, read with universal newlines, so ``\\r\\n`` and ``\\r`` come back as ``\\n``)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def final_output(phase2_generation: str, func_name: str, strip: bool = True) -> str:
    """The inference script's final result (what it saves as ``<index>_<opt>.c``)."""
    return strip_name(phase2_generation, func_name) if strip else phase2_generation


def evaluation_text(saved_output: str, func_name: str) -> str:
    """The candidate evaluate_exe.py compiles for a model row: the saved output read back, name replaced again."""
    return strip_name(file_roundtrip(saved_output), func_name)


def decompiler_text(pseudo: str, func_name: str) -> str:
    """The candidate of an IDA / Ghidra row in evaluate_exe.py: the raw last space-separated token before the
    first ``(`` replaced by ``func_name`` (no strip, no ``*`` handling), then the model rows' replacement."""
    old = pseudo.split("(")[0].split(" ")[-1]
    return strip_name(pseudo.replace(old, func_name), func_name)


def assemble_program(func_dep: str, candidate: str, test: str) -> str:
    """cal_execute_rate.py's translation unit: ``func_dep + "\\n" + candidate + "\\n" + test``."""
    return func_dep + "\n" + candidate + "\n" + test

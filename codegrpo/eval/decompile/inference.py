"""Two-phase inference (skeleton, then skin) and its prompts (codegrpo.eval.decompile)."""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from codegrpo.eval.decompile.data import DecompileTask, SKELETON_PROMPT, SKIN_PROMPT
from codegrpo.eval.decompile.execution import restore_function_name

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------------
# Inputs and two-phase inference


DEFAULT_STYLE = "{BasedOnStyle: Google, DerivePointerAlignment: true}"


def make_normalizer(
    style: str = DEFAULT_STYLE, timeout: float = 10.0, clang_format: str | None = None
) -> Callable[[str], str]:
    """The skeleton model's input: pseudo-code through the project's pseudo-code normaliser.

    Deviation from the reference (documented in docs/evaluation.md): the reference feeds IDA pseudo-code
    normalised by its own script; only Ghidra pseudo-code ships with HumanEval-Decompile here. Evaluation
    keeps every task: the normaliser's length filter is off, and a function clang-format rejects is given
    with comments, hex literals and keywords normalised but unformatted (counted in the result file).
    """
    from codegrpo.data import normalize

    exe = normalize.find_clang_format(clang_format)

    def run(pseudo: str) -> str:
        norm, _reason = normalize.normalize_pseudo(
            pseudo, exe=exe, timeout=timeout, min_lines=-1, max_lines=10**9, style=style
        )
        if norm is None:
            return normalize.drop_blank_lines(normalize.pre_format(pseudo))
        return norm

    return run


def skeleton_prompt(normalized_pseudo: str) -> str:
    return SKELETON_PROMPT.format(code=normalized_pseudo.strip())


def skin_prompt(ir: str) -> str:
    return SKIN_PROMPT.format(code=ir.strip())


def _run_phase(gen, prompts: list[str], desc: str, rendered: list | None = None) -> list[list[str]]:
    """Generate with ``gen``; when ``gen`` is a factory, build the generator and close it afterwards.

    ``rendered``, when given, receives the exact texts the model was given (after any chat template)."""
    from codegrpo.eval.generate import apply_template

    def run(g):
        if rendered is not None:
            tok, settings = getattr(g, "tokenizer", None), getattr(g, "settings", None)
            use = bool(getattr(settings, "use_chat_template", False))
            rendered.extend(apply_template(tok, p, use) if tok is not None else p for p in prompts)
        return g.generate(prompts, desc=desc)

    if hasattr(gen, "generate"):
        return run(gen)
    built = gen()
    try:
        return run(built)
    finally:
        close = getattr(built, "close", None)
        if close is not None:
            close()


def two_phase(
    tasks: Sequence[DecompileTask], skeleton_gen, skin_gen=None, normalizer: Callable[[str], str] | None = None
) -> dict[str, dict]:
    """Run phase 1 (and phase 2 when ``skin_gen`` is given) on every task.

    ``skeleton_gen`` / ``skin_gen`` are generators, or zero-argument callables that build one. A generator built
    here is closed after its phase, before the next one is built: all skeleton outputs first, then the skin
    model, never two engines on the GPU at once.
    Returns task key -> {"input", "ir", "output"}; ``output`` is the final C (the IR when there is no skin model).
    """
    normalizer = normalizer or make_normalizer()
    inputs = [normalizer(t.pseudo) for t in tasks]
    ir_raw = _run_phase(skeleton_gen, [skeleton_prompt(x) for x in inputs], "skeleton")
    irs = [restore_function_name(samples[0], t.func_name) for samples, t in zip(ir_raw, tasks)]
    if skin_gen is not None:
        src_raw = _run_phase(skin_gen, [skin_prompt(ir) for ir in irs], "skin")
        outs = [restore_function_name(samples[0], t.func_name) for samples, t in zip(src_raw, tasks)]
    else:
        outs = irs
    return {t.key: {"input": x, "ir": ir, "output": o} for t, x, ir, o in zip(tasks, inputs, irs, outs)}


def sk2d_two_phase(tasks: Sequence[DecompileTask], skeleton_gen, skin_gen=None, strip: bool = True) -> dict[str, dict]:
    """SK²Decompile's inference exactly as ``sk2decompile_inf.py`` runs it (:mod:`codegrpo.eval.sk2d_protocol`).

    Phase 1 reads each task's configured input field as is; phase 2 reads phase 1's raw generation; the function
    name is replaced only in the final output (``--strip 1``). Without a skin model (the IR-only ablation rows;
    the reference scripts do not show how the paper scored them -- reconstructed) the final output is phase 1's
    generation with the same replacement. Returns task key -> the reference log's fields: ``input_field``,
    ``prompt_model1`` / ``prompt_model2`` (the exact text given to the model, after any chat template),
    ``gen_result_model1`` / ``gen_result_model2`` (raw generations; None without a skin model) and
    ``final_result``.
    """
    from codegrpo.eval import sk2d_protocol as sk2d

    shown1: list[str] = []
    gen1 = [
        samples[0]
        for samples in _run_phase(skeleton_gen, [sk2d.phase1_prompt(t.pseudo) for t in tasks], "skeleton", shown1)
    ]
    shown2: list[str] = []
    if skin_gen is not None:
        gen2 = [samples[0] for samples in _run_phase(skin_gen, [sk2d.phase2_prompt(g) for g in gen1], "skin", shown2)]
    else:
        gen2 = [None] * len(tasks)
    out = {}
    for i, t in enumerate(tasks):
        last = gen2[i] if gen2[i] is not None else gen1[i]
        out[t.key] = {
            "input_field": t.input_field,
            "prompt_model1": shown1[i],
            "gen_result_model1": gen1[i],
            "prompt_model2": shown2[i] if shown2 else None,
            "gen_result_model2": gen2[i],
            "final_result": sk2d.final_output(last, t.func_name, strip),
        }
    return out

"""SK²Decompile evaluation: two-phase inference, re-executability, identifier quality.

Two evaluation-set schemas are read: the legacy HumanEval-Decompile files (``task_id, type, c_func, c_test,
input_asm_prompt``) and SK²Decompile's ``{humaneval,mbpp}_normsrcpseudo.json`` (``index, func_name, func_dep,
func, test, opt, language, ida_pseudo, ghidra_pseudo``; ``load_eval_set`` picks the loader by schema).

Two re-executability protocols (``PROTOCOLS``) differ only in where the ``#include`` lines go:
``sk2decompile`` (``evaluate_exe.py``) compiles ``func_dep + "\n" + candidate + "\n" + test`` -- the gold
function's dependencies first, the test (with its own includes) after the candidate; for the legacy files
``func_dep`` is the include lines of ``c_func``. ``llm4decompile`` (the older harness) moves every line
containing ``#include`` (the test's too) above the candidate, so a candidate using a type only the test's
headers declare (``bool``, ...) compiles there and not under ``sk2decompile``. In both, the program is
compiled with ``gcc -O0 ... -lm`` and passes iff it exits 0 within the time limit.

Under ``llm4decompile``, every line containing ``#include`` is collected from the task's gold function and from its test (and
removed from them); the decompiled function is compiled alone after those includes (``gcc -S``: the
"compilable" flag), then ``includes + decompiled + test`` is compiled with ``gcc -O0 ... -lm`` and run
in the sandbox with a time limit. A task passes iff the program exits with status 0 (the test is a
``main`` with C ``assert``s). Rates are passed / tasks per optimisation level, and their mean.

Inference is two-phase: the skeleton (structure-recovery) model turns pseudo-code into the IR, the skin
(identifier-naming) model turns the IR into C; decoding is greedy. Under ``sk2decompile`` everything follows the
reference scripts step by step (:mod:`codegrpo.eval.sk2d_protocol`, :func:`sk2d_two_phase`): the configured input
field (``ida_pseudo_norm``) as is, the raw phase-1 generation in the phase-2 prompt, the reference's name
replacement on the final output only and again when scoring, one full compile and a run. The legacy path
(``llm4decompile``: the legacy HumanEval-Decompile file, Ghidra pseudo-code through this project's normaliser)
restores the name after each phase with a guarded rule (``restore_function_name``).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Mapping, Sequence

from codegrpo.contracts import gcc_version
from codegrpo.eval.decompile.data import (
    C_NAME_RE,
    DecompileTask,
    EvalDataError,
    HE_FIELDS,
    LEVELS,
    NSP_FIELDS,
    PROTOCOLS,
    SKELETON_PROMPT,
    SKIN_PROMPT,
    check_eval_set,
    detect_schema,
    fetch_eval_file,
    file_sha256,
    load_eval_set,
    load_humaneval_decompile,
    load_normsrcpseudo,
)
from codegrpo.eval.decompile.execution import (
    ExecOutcome,
    build_programs,
    c_hack_patterns,
    check_program,
    exit_guard,
    reexecutability,
    restore_function_name,
    split_includes,
    summarize_records,
)
from codegrpo.eval.decompile.inference import (
    DEFAULT_STYLE,
    make_normalizer,
    sk2d_two_phase,
    skeleton_prompt,
    skin_prompt,
    two_phase,
)
from codegrpo.eval.decompile.identifier import (
    identifier_scores,
    load_bringupbench,
    mean,
    metric_embedding,
    metric_embedding_config,
)

__all__ = [
    "BASELINES",
    "C_NAME_RE",
    "DEFAULT_STYLE",
    "DecompileTask",
    "EvalDataError",
    "ExecOutcome",
    "HE_FIELDS",
    "LEVELS",
    "NSP_FIELDS",
    "PROTOCOLS",
    "SKELETON_PROMPT",
    "SKIN_PROMPT",
    "baseline_outputs",
    "build_programs",
    "c_hack_patterns",
    "check_eval_set",
    "check_program",
    "detect_schema",
    "exit_guard",
    "fetch_eval_file",
    "file_sha256",
    "identifier_scores",
    "load_bringupbench",
    "load_eval_set",
    "load_humaneval_decompile",
    "load_normsrcpseudo",
    "make_normalizer",
    "mean",
    "metric_embedding",
    "metric_embedding_config",
    "reexecutability",
    "restore_function_name",
    "run_baseline",
    "run_bringupbench_identifier",
    "run_system",
    "sk2d_two_phase",
    "skeleton_prompt",
    "skin_prompt",
    "split_includes",
    "summarize_records",
    "two_phase",
]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------------
# Stage entry points: each writes one result JSON (atomically) with its provenance


BASELINES = {
    "gold": ("Gold source (sanity check)", "the benchmark's own gold function"),
    "ghidra": ("Ghidra pseudo-code (raw)", "Ghidra pseudo-code, unmodified (name restored)"),
    "ida": ("IDA pseudo-code (raw)", "IDA Pro pseudo-code (ida_pseudo), unmodified (name restored)"),
}


def baseline_outputs(kind: str, tasks: Sequence[DecompileTask], protocol: str, source: str = "") -> dict[str, str]:
    """The outputs of a row that needs no model, per task key.

    Under ``sk2decompile`` the IDA / Ghidra texts are already the candidates evaluate_exe.py compiles (both name
    replacements applied: :func:`codegrpo.eval.sk2d_protocol.decompiler_text`); score them with
    ``restore_names=False``."""
    from codegrpo.eval.sk2d_protocol import decompiler_text

    if kind not in BASELINES:
        raise ValueError(f"unknown baseline {kind!r}; known: {sorted(BASELINES)}")
    out = {}
    for t in tasks:
        if kind == "gold":
            # sk2decompile: the func field as is (its includes live in func_dep); llm4decompile: includes moved up
            out[t.key] = (
                t.c_func
                if protocol == "sk2decompile" and t.func_dep is not None
                else split_includes(t.c_func)[1][0].strip() + "\n"
            )
        elif t.decompiled:
            text = dict(t.decompiled)[kind]
            out[t.key] = decompiler_text(text, t.func_name) if protocol == "sk2decompile" else text
        elif kind == "ghidra":
            out[t.key] = decompiler_text(t.pseudo, t.func_name) if protocol == "sk2decompile" else t.pseudo
        else:
            raise EvalDataError(
                f"{source}: the {kind!r} row needs an evaluation file with {kind}_pseudo fields (normsrcpseudo schema)"
            )
    return out


def run_baseline(
    kind: str,
    data_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    levels=LEVELS,
    tasks_per_level: int | None = None,
    workers: int = 1,
    timeout: float = 10.0,
    sandbox_limits: Mapping | None = None,
    cfg: Mapping | None = None,
    benchmark: str = "humaneval_decompile",
    protocol: str = "llm4decompile",
    cache_dir: str | os.PathLike | None = None,
) -> dict:
    """Score a row that needs no model: ``gold`` (must be 100%), ``ghidra`` or ``ida`` (raw decompiler output)."""
    from codegrpo.eval import provenance
    from codegrpo.io import write_json

    if kind not in BASELINES:
        raise ValueError(f"unknown baseline {kind!r}; known: {sorted(BASELINES)}")
    tasks = load_eval_set(data_path, levels, tasks_per_level, cache_dir)
    outputs = baseline_outputs(kind, tasks, protocol, str(data_path))
    res = reexecutability(
        tasks,
        outputs,
        workers=workers,
        timeout=timeout,
        sandbox_limits=sandbox_limits,
        desc=f"re-exec {kind} {benchmark}",
        protocol=protocol,
        restore_names=protocol != "sk2decompile",
        from_file=False,
    )
    label, note = BASELINES[kind]
    result = {
        "kind": "decompile",
        "benchmark": benchmark,
        "system": kind,
        "label": label,
        "variant": None,
        "input_note": note,
        "data": str(data_path),
        "data_sha256": file_sha256(data_path, cache_dir),
        "protocol": protocol,
        "input_field": None,
        "provenance": provenance(None, dict(cfg or {}), gcc=_gcc()),
        **res,
    }
    write_json(out_path, result)
    return result


def _gcc() -> str:
    """The sandbox's compiler (``gcc`` on its PATH) for the provenance record; "unavailable" if it cannot run."""
    return gcc_version("gcc") or "unavailable"


def run_system(
    name: str,
    skeleton_dir: str | os.PathLike,
    skin_dir: str | os.PathLike | None,
    data_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    settings,
    backend: str = "auto",
    levels=LEVELS,
    tasks_per_level: int | None = None,
    workers: int = 1,
    timeout: float = 10.0,
    label: str | None = None,
    variant: str | None = None,
    identifier: bool = False,
    embedding: Mapping | None = None,
    normalizer_style: str = DEFAULT_STYLE,
    sandbox_limits: Mapping | None = None,
    cfg: Mapping | None = None,
    benchmark: str = "humaneval_decompile",
    protocol: str = "llm4decompile",
    cache_dir: str | os.PathLike | None = None,
    embedding_log: str | os.PathLike | None = None,
    input_field: str | None = None,
) -> dict:
    """Two-phase inference with the given model folders, then re-executability (and identifier quality).

    ``protocol="sk2decompile"``: the reference's inference and scoring (:func:`sk2d_two_phase`), the model input
    read as is from ``input_field`` (default ``ida_pseudo_norm``); checked in every row before any model loads.
    ``llm4decompile``: the legacy path (this project's normaliser on the pseudo-code, :func:`two_phase`).

    ``embedding`` is the identifier metric's embedding section (:func:`metric_embedding_config`); a served
    model's server log goes to ``embedding_log``.
    """
    from codegrpo.eval import provenance, training_runs
    from codegrpo.eval.generate import make_generator
    from codegrpo.io import write_json

    from codegrpo.eval.sk2d_protocol import DEFAULT_INPUT_FIELD

    t0 = time.time()
    reference = protocol == "sk2decompile"
    if reference:
        input_field = input_field or DEFAULT_INPUT_FIELD
    tasks = load_eval_set(data_path, levels, tasks_per_level, cache_dir, input_field if reference else None)
    ida_inputs = bool(tasks) and bool(tasks[0].decompiled)
    backends: list[str] = []

    def build(model_dir):
        g = make_generator(model_dir, settings, backend)
        backends.append(g.backend)
        return g

    # one generator (one vLLM engine) alive at a time: the skeleton's is closed before the skin's is built
    skel, skin = (lambda: build(skeleton_dir)), ((lambda: build(skin_dir)) if skin_dir else None)
    if reference:
        gen = sk2d_two_phase(tasks, skel, skin)
        outputs = {k: v["final_result"] for k, v in gen.items()}
    else:
        gen = two_phase(tasks, skel, skin, make_normalizer(normalizer_style))
        outputs = {k: v["output"] for k, v in gen.items()}
    res = reexecutability(
        tasks,
        outputs,
        workers=workers,
        timeout=timeout,
        sandbox_limits=sandbox_limits,
        desc=f"re-exec {name} {benchmark}",
        protocol=protocol,
    )
    for rec in res["records"]:
        g = gen[f"{rec['task_id']}_{rec['opt']}"]
        if reference:
            rec.update(g)
        else:
            rec["input"], rec["ir"] = g["input"], g["ir"]
    if reference:
        note = (
            f"the evaluation file's {input_field} field as is (sk2decompile_inf.py --decompiler {input_field}), "
            f"raw prompts{' in the chat template' if settings.use_chat_template else ''}"
            + (
                "; IR only: phase 1's output scored with the reference's name replacement (reconstructed)"
                if not skin_dir
                else ""
            )
        )
    elif ida_inputs:
        note = "IDA pseudo-code (ida_pseudo) through this project's pseudo-code normaliser"
    else:
        note = (
            "Ghidra pseudo-code through this project's pseudo-code normaliser (the reference uses "
            "IDA-normalised pseudo-code, not in this evaluation file)"
        )
    result = {
        "kind": "decompile",
        "benchmark": benchmark,
        "system": name,
        "label": label or name,
        "variant": variant,
        "protocol": protocol,
        "input_field": input_field if reference else None,
        "ir_only": not skin_dir,
        "chat_template": bool(settings.use_chat_template),
        "max_new_tokens": settings.max_new_tokens,
        "temperature": settings.temperature,
        "input_note": note,
        "data": str(data_path),
        "data_sha256": file_sha256(data_path, cache_dir),
        "models": {"skeleton": str(skeleton_dir), "skin": str(skin_dir) if skin_dir else None},
        "backend": backends[0],
        "provenance": provenance(
            f"{skeleton_dir}" + (f" + {skin_dir}" if skin_dir else ""),
            dict(cfg or {}),
            gcc=_gcc(),
            training_runs=training_runs(skeleton_dir, skin_dir),
        ),
        **res,
    }
    if identifier:
        refs = [split_includes(t.c_func)[1][0] for t in tasks]  # the gold function without includes
        with metric_embedding(embedding, embedding_log) as (overrides, used):
            scores = identifier_scores([outputs[t.key] for t in tasks], refs, embedding=overrides)
        result["identifier"] = {"mean": mean(scores), "n": len(scores), "embedding": used}
        for rec, s in zip(res["records"], scores):
            rec["identifier"] = s
    result["seconds"] = round(time.time() - t0, 1)
    write_json(out_path, result)
    return result


def run_bringupbench_identifier(
    data_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    columns: Sequence[str] = ("infer-out-model1", "infer-out-model2"),
    limit: int | None = None,
    embedding: Mapping | None = None,
    cfg: Mapping | None = None,
    embedding_log: str | os.PathLike | None = None,
) -> dict:
    """Identifier quality of the shipped BringUpBench outputs of the reference models against the source.

    ``embedding``: the metric's embedding section (:func:`metric_embedding_config`; the configured model, served
    for the duration of the scoring when ``serve`` is set, its log in ``embedding_log``).
    """
    from codegrpo.eval import provenance
    from codegrpo.io import write_json

    rows = load_bringupbench(data_path, limit)
    refs = [r["source"]["content"] for r in rows]
    scores = {}
    for col in columns:
        missing = [i for i, r in enumerate(rows) if not isinstance(r.get(col), str)]
        if missing:
            raise EvalDataError(f"{data_path}: line {missing[0] + 1}: field {col!r} missing or not a string")
    with metric_embedding(embedding, embedding_log) as (overrides, used):
        for col in columns:
            vals = identifier_scores([r[col] for r in rows], refs, embedding=overrides)
            scores[f"reference {col}"] = {"mean": mean(vals), "n": len(vals)}
            log.info(
                "bringupbench %s: identifier score %.4f over %d functions (%s model %s)",
                col,
                mean(vals),
                len(vals),
                used["backend"],
                used["model"],
            )
    result = {
        "kind": "identifier",
        "benchmark": "bringupbench_O0",
        "system": "reference_outputs",
        "label": "reference model outputs",
        "data": str(data_path),
        "embedding": used,
        "provenance": provenance("LLM4Binary sk2decompile (shipped outputs)", dict(cfg or {})),
        "scores": scores,
    }
    write_json(out_path, result)
    return result

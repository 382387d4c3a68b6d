"""Does a real pretrained model learn through the DHRCL path? (target ``learning_real``, docs/learning.md)

A measurement, not a demonstration: the packaged SmolLM2-135M-Instruct (``packaged:smollm2-135m-instruct``,
:mod:`codegrpo.packaged`) is trained with GRPO by the pipeline's own DHRCL trainer
(:func:`codegrpo.verl.dhrcl.run_dhrcl`: verl 0.4.1 in CPU mode, the sandboxed KodCode reward) in each variant of
``learning_real.variants`` (DHRCL ``full`` and the two GRPO baselines), on a fixed slice of easy KodCode problems.

* **slice** (:func:`select_slice`): the shipped KodCode records of ``gpt_difficulty`` ``easy`` whose reference
  solution passes its own tests in the sandbox, shortest prompt + solution first (ties by question id); the
  prompt is the data stage's, with the function signatures the tests call (``Your code must define: def f(...)``).
  Every other record of that order is held out (``heldout``), the rest is split into ``train`` and ``val`` (the
  curriculum's validation signal). No held-out problem is trained on.
* **before / after** (:func:`evaluate_model`): the same held-out problems, the same sampling (``n_samples``
  completions per problem at ``temperature`` / ``top_p``, seed ``eval.seed``) through the evaluation harness of the
  pipeline (:func:`codegrpo.eval.codegen.evaluate_samples`, benchmark ``kodcode_heldout``): pass@1 (the share of
  samples passing every test, averaged over problems) and the mean test pass rate (the samples' ``r_pass``).
* **noise, verdict, report** (:mod:`codegrpo.learning_real_report`): the base model evaluated again at
  another sampling seed (the sampling noise) and ``training.noise_variant`` trained again at each of
  ``training.noise_seeds`` (runs ``<variant>.train<seed>``, :func:`run_names`: the training noise); a variant
  *learned* when pass@1 after - before exceeds both noises and twice the paired bootstrap standard error of the
  change; the per-step reward components and the share of zero-variance GRPO groups of each run.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.io import atomic_path, write_json

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "heldout")
TIMING_FILE = "learning_real.json"  # in a run folder: the run's wall time and training settings


class LearningRealError(RuntimeError):
    """The measurement cannot be made as configured (the message names the key or the file)."""


NOISE_RUN = "{variant}.train{seed}"  # a training-noise run's name: the variant trained again at another seed


def run_names(lr_cfg: Mapping[str, Any]) -> list[str]:
    """Every training run of ``learning_real``: the variants, then the noise variant at each noise seed."""
    t = lr_cfg["training"]
    variants = list(lr_cfg["variants"])
    if t["noise_seeds"] and t["noise_variant"] not in variants:
        raise LearningRealError(
            f"learning_real.training.noise_variant: {t['noise_variant']!r} is not one of learning_real.variants "
            f"{variants}"
        )
    return variants + [NOISE_RUN.format(variant=t["noise_variant"], seed=s) for s in t["noise_seeds"]]


def parse_run(name: str) -> tuple[str, int | None]:
    """``(variant, training seed)`` of a run name; the seed is None for a variant's own run (the config's seed)."""
    m = re.fullmatch(r"(.+)\.train(\d+)", name)
    return (m.group(1), int(m.group(2))) if m else (name, None)


# ---------------------------------------------------------------------------------------------------------
# the slice
# ---------------------------------------------------------------------------------------------------------
def candidate_records(paths: Sequence[str | os.PathLike], difficulty: str | None) -> list[dict]:
    """Parsed KodCode records (as the data stage parses them) of ``gpt_difficulty`` ``difficulty`` (all when
    None), shortest prompt + solution first, ties by question id; records the data stage rejects are skipped."""
    from codegrpo.data.ingest import DataError
    from codegrpo.data.kodcode import DEFAULT_MAX_LINE_BYTES, Filtered, iter_records, parse_kodcode_record

    records = []
    for p in paths:
        for _line, obj, _raw in iter_records(Path(p), DEFAULT_MAX_LINE_BYTES):
            if isinstance(obj, Exception) or not isinstance(obj, dict):
                continue
            if difficulty is not None and obj.get("gpt_difficulty") != difficulty:
                continue
            try:
                records.append(parse_kodcode_record(obj))
            except (Filtered, DataError, ValueError, KeyError, TypeError):
                continue
    records.sort(key=lambda r: (len(r["prompt"]) + len(r["solution"]), r["question_id"]))
    return records


def reference_passes(records: Sequence[dict], sandbox_limits: Mapping | None, timeout_s: float) -> list[bool]:
    """Whether each record's reference solution passes its own tests in the sandbox."""
    import concurrent.futures as cf

    from codegrpo.data.kodcode import verify_reason
    from codegrpo.sandbox import make_sandbox

    workers = int((sandbox_limits or {}).get("workers") or 2)
    with make_sandbox(workers, sandbox_limits) as sb, cf.ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda r: sb.run_tests(r["solution"], r["test_code"], timeout_s=timeout_s), records))
    return [verify_reason(res) is None for res in results]


def split_slice(records: Sequence[dict], n_train: int, n_val: int, n_heldout: int) -> dict[str, list[dict]]:
    """Every other record (odd positions of the length order) to ``heldout`` until it is full, so both sides span
    the same lengths; of the rest, ``n_val`` evenly spaced records to ``val`` and ``n_train`` to ``train``."""
    need = n_train + n_val + n_heldout
    if len(records) < need:
        raise LearningRealError(
            f"learning_real.slice asks for {n_train} train + {n_val} val + {n_heldout} held-out "
            f"problems, but only {len(records)} records qualify"
        )
    chosen = list(records[:need])
    heldout_idx = set(range(1, need, 2)[:n_heldout])
    if len(heldout_idx) < n_heldout:  # more held out than every other record: fill from the end
        heldout_idx |= set(sorted(set(range(need)) - heldout_idx)[len(heldout_idx) - n_heldout :])
    heldout = [r for i, r in enumerate(chosen) if i in heldout_idx]
    rest = [r for i, r in enumerate(chosen) if i not in heldout_idx]
    val_idx = {round(i * len(rest) / n_val) for i in range(n_val)} if n_val else set()
    val = [r for i, r in enumerate(rest) if i in val_idx]
    train = [r for i, r in enumerate(rest) if i not in val_idx][:n_train]
    return {"train": train, "val": val, "heldout": heldout}


def select_slice(cfg: Mapping[str, Any], out_dir: str | os.PathLike) -> dict:
    """Write ``{train,val,heldout}.parquet`` (verl RL rows) and ``slice.json`` (the question ids and how they were
    chosen) under ``out_dir``; returns the ``slice.json`` record."""
    import pandas as pd

    from codegrpo.data.kodcode import rl_row

    lr = cfg["learning_real"]
    s = lr["slice"]
    need = int(s["train"]) + int(s["val"]) + int(s["heldout"])
    pool = candidate_records(cfg["data"]["kodcode"]["paths"], s["difficulty"])
    # verify in order until enough references pass (a few shipped references fail their own tests)
    kept, rejected, i = [], [], 0
    while len(kept) < need and i < len(pool):
        chunk = pool[i : i + need - len(kept)]
        for rec, ok in zip(chunk, reference_passes(chunk, cfg.get("sandbox"), float(lr["eval"]["timeout_s"]))):
            (kept if ok else rejected).append(rec)
        i += len(chunk)
    parts = split_slice(kept, int(s["train"]), int(s["val"]), int(s["heldout"]))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, recs in parts.items():
        with atomic_path(out / f"{split}.parquet") as tmp:
            pd.DataFrame([rl_row(r, j, split) for j, r in enumerate(recs)]).to_parquet(tmp)
    record = {
        "difficulty": s["difficulty"],
        "candidates": len(pool),
        "reference_failed": [r["question_id"] for r in rejected],
        **{split: [r["question_id"] for r in recs] for split, recs in parts.items()},
        "prompt_chars": {split: [len(r["prompt"]) for r in recs] for split, recs in parts.items()},
    }
    write_json(out / "slice.json", record)
    return record


# ---------------------------------------------------------------------------------------------------------
# evaluation before / after
# ---------------------------------------------------------------------------------------------------------
def eval_dtype(cfg: Mapping[str, Any]) -> str:
    """The held-out sampling's weights dtype (``learning_real.eval.dtype``); ``auto``: the precision the CPU-mode
    training rollouts compute in (``cpu_precision``, codegrpo/verl/cpu.py), bfloat16 or float32."""
    dtype = str(cfg["learning_real"]["eval"]["dtype"])
    if dtype != "auto":
        return dtype
    from codegrpo.verl.cpu import resolve_precision

    return "bfloat16" if resolve_precision(cfg.get("cpu_precision", "auto")) == "bf16" else "float32"


def evaluate_model(
    model_dir: str | os.PathLike,
    heldout: str | os.PathLike,
    cfg: Mapping[str, Any],
    *,
    seed: int,
    out_path: str | os.PathLike,
    label: str,
) -> dict:
    """Sample the held-out problems from ``model_dir`` and score them with the pipeline's harness; writes
    ``out_path`` (summary, per-problem results, the completions) and returns it."""
    import time

    from codegrpo.eval.codegen import evaluate_samples, generate_samples, load_kodcode_heldout
    from codegrpo.eval.generate import GenerationSettings, HFGenerator

    ev = cfg["learning_real"]["eval"]
    problems = load_kodcode_heldout(heldout)
    settings = GenerationSettings(
        max_new_tokens=int(ev["max_new_tokens"]),
        temperature=float(ev["temperature"]),
        top_p=float(ev["top_p"]),
        n=int(ev["n_samples"]),
        batch_size=int(ev["batch_size"]),
        max_prompt_tokens=int(ev["max_prompt_tokens"]),
        use_chat_template=True,
        seed=seed,
        dtype=eval_dtype(cfg),
    )
    t0 = time.time()
    gen = HFGenerator(model_dir, settings)
    try:
        samples = generate_samples(gen, problems, desc=f"learning_real {label}")
    finally:
        gen.close()
    t_gen = time.time() - t0
    summary = evaluate_samples(
        "kodcode_heldout",
        problems,
        samples,
        ks=(1,),
        workers=int(cfg["sandbox"]["workers"]),
        timeout=float(ev["timeout_s"]),
        sandbox_limits=cfg.get("sandbox"),
        suites={"allow_shared_uid": bool(ev["allow_shared_uid"])},
    )
    records = summary.pop("records")
    per_problem: dict[str, dict] = {}
    for r in records:
        p = per_problem.setdefault(r["problem_id"], {"passed": [], "pass_rate": []})
        p["passed"].append(bool(r["passed"]))
        p["pass_rate"].append(r["n_pass"] / r["n_test"] if r["n_test"] else 0.0)
    result = {
        "label": label,
        "model_dir": str(model_dir),
        "seed": seed,
        "sampling": {**dict(ev), "seed": seed, "dtype": settings.dtype},  # the dtype resolved (no "auto")
        "pass@1": summary["pass@k"]["1"] / 100.0,
        "r_pass": summary["test_pass_rate"] / 100.0,
        "syntax_acc": summary["syntax_acc"] / 100.0,
        "exec_acc": summary["exec_acc"] / 100.0,
        "guarded": summary["guarded"],
        "n_problems": summary["n_problems"],
        "per_problem": per_problem,
        "seconds": {"generate": round(t_gen, 1), "total": round(time.time() - t0, 1)},
        "samples": samples,
    }
    write_json(out_path, result)
    return result


# ---------------------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------------------
def run_config(cfg: Mapping[str, Any], max_prompt_tokens: int) -> dict:
    """The pipeline config whose ``dhrcl`` section carries ``learning_real.training`` and its curriculum."""
    from codegrpo.learning import dhrcl_run_config

    t = cfg["learning_real"]["training"]
    same_name = {k: t[k] for k in ("n", "lr", "kl_coef", "max_response_length", "temperature")}
    return dhrcl_run_config(
        cfg,
        batch=t["train_batch_size"],
        micro=t["micro_batch_size"],
        steps=int(t["steps"]),
        max_prompt_tokens=max_prompt_tokens,
        curriculum=cfg["learning_real"]["curriculum"],
        **same_name,
    )


def train_variant(
    cfg: Mapping[str, Any],
    variant: str,
    *,
    data_dir: str | os.PathLike,
    init_model: str,
    run_dir: str | os.PathLike,
    seed: int | None = None,
) -> dict:
    """GRPO run of ``variant`` from ``init_model`` on the slice (``run_dhrcl``: the paper stages' trainer), at
    training seed ``seed`` (None: the config's ``seed``)."""
    import time

    import pandas as pd

    from codegrpo.learning import prompt_tokens
    from codegrpo.verl.dhrcl import run_dhrcl

    data = Path(data_dir)
    prompts = [
        row[-1]["content"] for split in ("train", "val") for row in pd.read_parquet(data / f"{split}.parquet")["prompt"]
    ]
    rcfg = run_config(cfg, prompt_tokens(init_model, prompts) + 8)
    t0 = time.time()
    done = run_dhrcl(
        rcfg,
        variant,
        train_files=str(data / "train.parquet"),
        val_files=str(data / "val.parquet"),
        init_model=init_model,
        run_dir=run_dir,
        seed=int(cfg.get("seed", 0)) if seed is None else int(seed),
    )
    write_json(
        Path(run_dir) / TIMING_FILE,
        {
            "variant": variant,
            "seed": seed,
            "seconds": round(time.time() - t0, 1),
            "training": rcfg["dhrcl"]["training"],
        },
    )
    return done

"""The curriculum check of the learning checks (:mod:`codegrpo.learning`): a tiny model fine-tuned on a few KodCode
reference solutions, then a DHRCL run on those problems whose stages must advance by the trend rule (saturation or
plateau), never by a stage's step cap."""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.io import atomic_path, iter_jsonl, write_json
from codegrpo.learning.direction import SCORE_KEY, LearningCheckError

log = logging.getLogger(__name__)

GATES = {1: "a_syntax", 2: "a_exec", 3: "a_pass"}  # the batch-mean gate each stage's reward applies


def curriculum_problems(paths: Sequence[str | os.PathLike], n: int) -> list[dict]:
    """The ``n`` KodCode records with the shortest prompt + reference solution (ties by question id), parsed
    exactly as the data stage parses them; records the data stage would reject or filter are skipped."""
    from codegrpo.data.ingest import DataError
    from codegrpo.data.kodcode import DEFAULT_MAX_LINE_BYTES, Filtered, iter_records, parse_kodcode_record

    records = []
    for p in paths:
        for _line, obj, _raw in iter_records(Path(p), DEFAULT_MAX_LINE_BYTES):
            try:
                if isinstance(obj, Exception):
                    continue
                records.append(parse_kodcode_record(obj))
            except (Filtered, DataError, ValueError, KeyError, TypeError):
                continue
    if len(records) < n:
        raise LearningCheckError(
            f"learning_check.curriculum.problems = {n}, but {', '.join(map(str, paths))} hold "
            f"only {len(records)} usable KodCode records"
        )
    records.sort(key=lambda r: (len(r["prompt"]) + len(r["solution"]), r["question_id"]))
    return records[:n]


def sft_response(solution: str) -> str:
    """What the SFT model learns to answer: the reference solution in the fenced block the prompt asks for."""
    return f"```python\n{solution.strip()}\n```"


def write_curriculum_dataset(problems: Sequence[dict], out_dir: str | os.PathLike) -> dict[str, Path]:
    """SFT (prompt/response) and verl RL parquet files of the problems; validation = the same problems."""
    import pandas as pd

    from codegrpo.data.kodcode import rl_row

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sft = [{"prompt": r["prompt"], "response": sft_response(r["solution"])} for r in problems]
    frames = {
        "sft": pd.DataFrame(sft),
        "rl_train": pd.DataFrame([rl_row(r, i, "train") for i, r in enumerate(problems)]),
        "rl_val": pd.DataFrame([rl_row(r, i, "val") for i, r in enumerate(problems)]),
    }
    paths = {}
    for name, df in frames.items():
        path = out / f"{name}.parquet"
        with atomic_path(path) as tmp:
            df.to_parquet(tmp)
        paths[name] = path
    return paths


def prompt_tokens(model_dir: str | os.PathLike, prompts: Sequence[str]) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return max(
        len(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True))
        for p in prompts
    )


def fit_solutions(
    model_dir: str | os.PathLike,
    pairs: Sequence[Mapping[str, str]],
    out_dir: str | os.PathLike,
    *,
    steps: int,
    lr: float,
    seed: int = 0,
) -> dict:
    """Fine-tune the tiny model on (prompt, response) pairs until it reproduces them; save it to ``out_dir``.

    The curriculum check's preparation step (not under test itself): a plain teacher-forced fit in one process,
    on the exact text verl's SFT dataset builds (chat template of the prompt with the generation prompt, then the
    response and EOS; loss on the response tokens). Returns the final loss and how many responses greedy
    decoding reproduces exactly.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from codegrpo.models import atomic_dir, model_init

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    with model_init():
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    seqs, prompts = [], []
    for p in pairs:
        prompt_ids = tok.apply_chat_template(
            [{"role": "user", "content": p["prompt"]}], add_generation_prompt=True, tokenize=True
        )
        resp_ids = tok(p["response"] + tok.eos_token, add_special_tokens=False)["input_ids"]
        seqs.append((prompt_ids, resp_ids))
        prompts.append(prompt_ids)
    width = max(len(a) + len(b) for a, b in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (a, b) in enumerate(seqs):
        n = len(a) + len(b)
        ids[i, :n] = torch.tensor(a + b)
        labels[i, len(a) : n] = torch.tensor(b)
        attn[i, :n] = 1
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    loss = None
    for _ in range(int(steps)):
        opt.zero_grad()
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.eval()
    exact = 0
    with torch.no_grad():
        for a, b in seqs:
            gen = model.generate(
                torch.tensor([a]),
                attention_mask=torch.ones(1, len(a), dtype=torch.long),
                max_new_tokens=len(b) + 4,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
            exact += gen[0, len(a) : len(a) + len(b)].tolist() == b
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    return {
        "final_loss": float(loss.item()) if loss is not None else None,
        "reproduced": exact,
        "pairs": len(seqs),
        "steps": int(steps),
        "lr": lr,
    }


def dhrcl_run_config(
    cfg: Mapping[str, Any],
    *,
    batch: int,
    n: int,
    lr: float,
    kl_coef: float,
    micro: int,
    max_prompt_tokens: int,
    max_response_length: int,
    steps: int,
    curriculum: Mapping[str, Any],
    **training: Any,
) -> dict:
    """A copy of the pipeline config whose ``dhrcl.training`` is one short CPU run (one optimiser step per training
    step, ``micro`` sequences per pass, a checkpoint at the end) and whose ``dhrcl.curriculum`` carries
    ``curriculum``; ``training`` adds further ``dhrcl.training`` keys. The input is not mutated."""
    out = copy.deepcopy(dict(cfg))
    d = dict(out["dhrcl"])
    d["training"] = {
        **dict(d["training"]),
        "import": None,
        "train_batch_size": batch,
        "n": n,
        "lr": lr,
        "kl_coef": kl_coef,
        "ppo_mini_batch_size": batch,
        "ppo_micro_batch_size_per_gpu": micro,
        "ref_log_prob_micro_batch_size_per_gpu": micro,
        "rollout_log_prob_micro_batch_size_per_gpu": micro,
        "max_prompt_length": max_prompt_tokens,
        "max_response_length": max_response_length,
        "gradient_checkpointing": False,
        "total_training_steps": steps,
        "total_epochs": steps,
        "save_freq": steps,
        "filter_overlong_prompts": False,
        **training,
    }
    d["curriculum"] = {**dict(d.get("curriculum") or {}), **dict(curriculum)}
    out["dhrcl"] = d
    return out


def curriculum_config(cfg: Mapping[str, Any], max_prompt_tokens: int) -> dict:
    """The pipeline config whose ``dhrcl`` section carries the curriculum check's settings."""
    c = dict(cfg["learning_check"]["curriculum"])
    out = dhrcl_run_config(
        cfg,
        batch=c["problems"],
        n=c["n"],
        lr=c["lr"],
        kl_coef=0.0,
        micro=c["problems"],
        max_prompt_tokens=max_prompt_tokens,
        max_response_length=c["max_response_length"],
        steps=int(c["steps"]),
        curriculum=c["trend"],
    )
    out["dhrcl"]["runs"] = ["full"]
    return out


def run_curriculum_check(cfg: Mapping[str, Any], *, out_dir: str | os.PathLike) -> dict:
    """SFT a tiny model on a few KodCode reference solutions, then run DHRCL (variant ``full``) on those problems;
    returns the verdict (also ``<out_dir>/verdict.json``): every stage change must come from the trend rule."""
    import pandas as pd

    from codegrpo.models import build_tiny_model, corpus_from_parquet
    from codegrpo.verl.dhrcl import run_dhrcl

    out = Path(out_dir)
    c = cfg["learning_check"]["curriculum"]
    problems = curriculum_problems(cfg["data"]["kodcode"]["paths"], int(c["problems"]))
    data = write_curriculum_dataset(problems, out / "data")
    tiny = out / "tiny"
    if not (tiny / "config.json").is_file():
        build_tiny_model(
            tiny,
            corpus_from_parquet([data["sft"], data["rl_train"]]),
            vocab_size=int(c["vocab_size"]),
            seed=int(cfg.get("seed", 0)),
        )
    max_prompt = prompt_tokens(tiny, [p["prompt"] for p in problems]) + 8
    ccfg = curriculum_config(cfg, max_prompt)
    sft = str(out / "sft")
    fit = fit_solutions(
        tiny,
        pd.read_parquet(data["sft"]).to_dict("records"),
        sft,
        steps=int(c["sft_steps"]),
        lr=float(c["sft_lr"]),
        seed=int(cfg.get("seed", 0)),
    )
    log.info(
        "curriculum check: fine-tuned on %d solutions, %d reproduced (loss %.4f)",
        fit["pairs"],
        fit["reproduced"],
        fit["final_loss"],
    )
    run_dir = out / "dhrcl"
    run_dhrcl(ccfg, "full", train_files=data["rl_train"], val_files=data["rl_val"], init_model=sft, run_dir=run_dir)
    verdict = {**curriculum_verdict(run_dir, ccfg), "sft": fit}
    write_json(out / "verdict.json", verdict)
    return verdict


def stage_timeline(metrics_file: str | os.PathLike) -> list[dict]:
    """Per training step: the stage the reward used, the gate it applied and that gate's batch mean."""
    path = Path(metrics_file)
    rows = []
    for _, rec in iter_jsonl(path, LearningCheckError):
        stage = rec.get("reward/stage/mean")
        if not isinstance(rec.get("step"), int) or rec["step"] < 1 or stage is None:
            continue
        stage = int(round(float(stage)))
        gate = GATES.get(stage)
        rows.append(
            {
                "step": rec["step"],
                "stage": stage,
                "gate": gate,
                "gate_value": rec.get(f"reward/{gate}/mean") if gate else None,
                "score": rec.get(SCORE_KEY),
                **{k: rec.get(f"reward/{k}/mean") for k in ("a_syntax", "a_exec", "a_pass")},
            }
        )
    return rows


def curriculum_verdict(run_dir: str | os.PathLike, cfg: Mapping[str, Any]) -> dict:
    """Read ``curriculum.json`` and ``metrics.jsonl`` of the run: ``passed`` when the run reached stage 3 and each
    transition's kind is ``saturation`` or ``plateau`` (never the step cap), and the stage the reward used in
    ``metrics.jsonl`` follows those transitions."""
    from codegrpo.verl.dhrcl import STATE_FILE

    run_dir = Path(run_dir)
    state_path = run_dir / STATE_FILE
    if not state_path.is_file():
        raise LearningCheckError(f"{state_path}: missing (did the DHRCL run validate?)")
    state = json.loads(state_path.read_text(encoding="utf-8"))
    transitions = state.get("transitions") or []
    timeline = stage_timeline(run_dir / "metrics.jsonl")
    stages = [r["stage"] for r in timeline]
    by_trend = all(t.get("kind") in ("saturation", "plateau") for t in transitions)
    follows = stages == sorted(stages) and set(stages) == {1, 2, 3}
    return {
        "passed": bool(len(transitions) == 2 and by_trend and follows),
        "transitions": transitions,
        "by_trend": by_trend,
        "reached_stage": max(stages) if stages else None,
        "timeline": timeline,
        "trend": dict(cfg["dhrcl"]["curriculum"]),
        "total_steps": cfg["dhrcl"]["training"]["total_training_steps"],
    }

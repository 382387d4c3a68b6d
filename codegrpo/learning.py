"""Learning checks: does training move rewards the right way? (mechanism checks on toy data, docs/learning.md)

Two checks, both through the real verl 0.4.1 path of the pipeline (``codegrpo.verl.stages.run_grpo`` /
``codegrpo.verl.dhrcl.run_dhrcl``: Hydra-validated launch, Ray, FSDP2, HF rollout, the project reward registry
and verl's reward manager), on CPU with a tiny model:

* **direction**: GRPO on the toy reward ``toy_target_chars`` (:mod:`codegrpo.rewards.toy`) with each policy loss
  (verl's vanilla GRPO objective and the DHRCL token-weighted loss in its three weightings). A run *learns*
  when the mean reward of its last ``k`` steps exceeds the mean of its first ``k`` steps by more than
  ``margin``; the control run flips the advantage's sign (a test-only hook of :mod:`codegrpo.verl.losses`) and
  must *unlearn* (last below first by more than ``margin``).
* **curriculum**: a tiny model is first fine-tuned on a handful of KodCode reference solutions, then a DHRCL run
  on those problems advances its stages because the validation signal saturates or plateaus (the trend rule),
  never because a stage hit its step cap.

Nothing here is a paper result: the outputs go to ``results/learning/`` and a report page of their own.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.io import atomic_path, iter_jsonl, write_json

log = logging.getLogger(__name__)

# the policy losses under check: name -> (verl loss_mode, needs the project losses in the workers)
LOSSES: dict[str, str] = {
    "grpo": "vanilla",
    "dhrcl_confidence": "dhrcl_confidence",
    "dhrcl_uniform": "dhrcl_uniform",
    "dhrcl_uncertainty": "dhrcl_uncertainty",
}
CONTROL = "grpo_sign_flipped"  # vanilla GRPO with the advantage's sign flipped: must lower the reward
CHECKS = (*LOSSES, CONTROL)
SCORE_KEY = "critic/score/mean"  # verl's per-step mean sequence reward

_WORDS = ("count", "list", "the", "numbers", "write", "digits", "value", "sum", "of", "and", "then", "next")


class LearningCheckError(RuntimeError):
    """A learning check's run produced no usable metrics (the message names the file)."""


# ---------------------------------------------------------------------------------------------------------
# toy data
# ---------------------------------------------------------------------------------------------------------
def toy_rows(n: int, seed: int, split: str) -> list[dict]:
    """verl RL rows of the toy task: short prompts mixing words and digits; ground truth = the target set."""
    from codegrpo.contracts import TOY_TARGET_CHARS
    from codegrpo.rewards.toy import DEFAULT_TARGET

    rng = random.Random(f"{seed}:{split}")
    rows = []
    for i in range(n):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 6))]
        nums = [str(rng.randint(0, 9999)) for _ in range(rng.randint(1, 3))]
        text = " ".join(words[:2] + nums + words[2:])
        rows.append(
            {
                "data_source": TOY_TARGET_CHARS,
                "prompt": [{"role": "user", "content": text}],
                "ability": "toy",
                "reward_model": {"style": "rule", "ground_truth": DEFAULT_TARGET},
                "extra_info": {"index": i, "split": split},
            }
        )
    return rows


def write_toy_dataset(out_dir: str | os.PathLike, n_train: int = 64, n_val: int = 8, seed: int = 0) -> dict[str, Path]:
    """``toy.train.parquet`` / ``toy.val.parquet`` in the verl RL schema."""
    import pandas as pd

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, n in (("train", n_train), ("val", n_val)):
        path = out / f"toy.{split}.parquet"
        with atomic_path(path) as tmp:
            pd.DataFrame(toy_rows(n, seed, split)).to_parquet(tmp)
        paths[split] = path
    return paths


def toy_corpus(seed: int = 0) -> list[str]:
    """Tokenizer texts for the check's tiny model: the toy prompts and a spread of digit strings."""
    rng = random.Random(seed)
    texts = [r["prompt"][0]["content"] for r in toy_rows(256, seed, "corpus")]
    texts += [" ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(8)) for _ in range(64)]
    return texts


# ---------------------------------------------------------------------------------------------------------
# direction checks
# ---------------------------------------------------------------------------------------------------------
def direction_config(cfg: Mapping[str, Any]) -> dict:
    """The pipeline config whose ``skeleton_rl`` section carries the learning check's GRPO settings (no KL, no
    validation during training, one checkpoint at the end)."""
    g = dict(cfg["learning_check"]["grpo"])
    out = copy.deepcopy(dict(cfg))
    section = dict(out["skeleton_rl"])
    steps = int(g["steps"])
    section.update(
        {
            "import": None,
            "lr": g["lr"],
            "train_batch_size": g["train_batch_size"],
            "n": g["n"],
            "ppo_mini_batch_size": g["ppo_mini_batch_size"],
            "ppo_micro_batch_size_per_gpu": g["train_batch_size"],
            "ref_log_prob_micro_batch_size_per_gpu": g["train_batch_size"],
            "rollout_log_prob_micro_batch_size_per_gpu": g["train_batch_size"],
            "max_prompt_length": g["max_prompt_length"],
            "max_response_length": g["max_response_length"],
            "kl_coef": 0.0,
            "temperature": 1.0,
            "gradient_checkpointing": False,
            "total_training_steps": steps,
            "total_epochs": steps,
            "save_freq": steps,
            "test_freq": steps + 1,
            "val_before_train": False,
            "reward": {"manager": "naive", "function": "compute_score"},
        }
    )
    out["skeleton_rl"] = section
    return out


def loss_overrides(check: str, token_weights: Mapping[str, Any] | None = None) -> list[str]:
    """Trainer overrides selecting the policy loss of ``check`` (one of :data:`CHECKS`); the keys are the
    adapter's (:func:`codegrpo.verl.launch.policy_loss_overrides`)."""
    from codegrpo.verl.launch import policy_loss_overrides

    if check == CONTROL:
        return policy_loss_overrides(None, sign_flipped=True)
    if check not in LOSSES:
        raise ValueError(f"unknown learning check {check!r}; one of {', '.join(CHECKS)}")
    return policy_loss_overrides(LOSSES[check], token_weights)


def run_direction_check(
    cfg: Mapping[str, Any], check: str, *, train_files, val_files, init_model: str, run_dir: str | os.PathLike
) -> dict:
    """One toy GRPO run with the policy loss of ``check``; returns its verdict (also written to verdict.json)."""
    from codegrpo.verl.stages import run_grpo

    run_dir = Path(run_dir)
    lc = cfg["learning_check"]
    dcfg = direction_config(cfg)
    overrides = loss_overrides(check, (cfg.get("dhrcl") or {}).get("token_weights"))
    if cfg["device"] == "cpu":
        overrides.append("+data.dataloader_num_workers=0")
    run_grpo(
        dcfg,
        dcfg["skeleton_rl"],
        f"learning-{check}",
        train_files=train_files,
        val_files=val_files,
        init_model=init_model,
        run_dir=run_dir,
        extra_overrides=overrides,
    )
    verdict = judge(
        reward_curve(run_dir / "metrics.jsonl"),
        expect="down" if check == CONTROL else "up",
        k=int(lc["k"]),
        margin=float(lc["margin"]),
    )
    verdict = {"check": check, "loss_mode": overrides[0].split("=", 1)[1], **verdict}
    write_json(run_dir / "verdict.json", verdict)
    return verdict


def reward_curve(metrics_file: str | os.PathLike, key: str = SCORE_KEY) -> list[float]:
    """The per-step mean training reward of a run, in step order (validation-only lines skipped)."""
    path = Path(metrics_file)
    if not path.is_file():
        raise LearningCheckError(f"{path}: no metrics file (did the run train?)")
    by_step: dict[int, float] = {}
    for _, rec in iter_jsonl(path, LearningCheckError):
        step, metrics = rec.get("step"), rec.get("metrics", rec)
        if isinstance(step, int) and step > 0 and key in metrics:
            by_step[step] = float(metrics[key])
    if not by_step:
        raise LearningCheckError(f"{path}: no step carries {key!r}")
    return [by_step[s] for s in sorted(by_step)]


def judge(curve: Sequence[float], expect: str, k: int, margin: float) -> dict:
    """Compare the mean of the first and last ``k`` steps: ``passed`` when the change has the expected sign and
    exceeds ``margin`` (``expect`` = ``"up"`` or ``"down"``)."""
    if expect not in ("up", "down"):
        raise ValueError(f"expect must be 'up' or 'down', got {expect!r}")
    if len(curve) < 2 * k:
        raise LearningCheckError(f"a run of {len(curve)} steps cannot compare its first and last {k} steps")
    first = sum(curve[:k]) / k
    last = sum(curve[-k:]) / k
    delta = last - first
    passed = delta > margin if expect == "up" else delta < -margin
    return {
        "expect": expect,
        "k": k,
        "margin": margin,
        "first": first,
        "last": last,
        "delta": delta,
        "passed": bool(passed),
        "curve": list(curve),
    }


# ---------------------------------------------------------------------------------------------------------
# the trend-driven curriculum run
# ---------------------------------------------------------------------------------------------------------
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
    fit = fit_solutions(
        tiny,
        pd.read_parquet(data["sft"]).to_dict("records"),
        out / "sft",
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
    run_dhrcl(
        ccfg,
        "full",
        train_files=data["rl_train"],
        val_files=data["rl_val"],
        init_model=str(out / "sft"),
        run_dir=run_dir,
    )
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


# ---------------------------------------------------------------------------------------------------------
# the report page
# ---------------------------------------------------------------------------------------------------------
def write_report(
    directions: Mapping[str, Mapping],
    curriculum: Mapping | None,
    out_md: str | os.PathLike,
    rewards_png: str | os.PathLike,
    timeline_png: str | os.PathLike | None = None,
) -> bool:
    """The "learning check" page: a verdict table, the toy reward curves (each loss and the sign-flipped
    control) and the curriculum run's stage timeline. Returns whether every check passed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codegrpo.plots import save_figure

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, v in directions.items():
        curve = v["curve"]
        ax.plot(
            range(1, len(curve) + 1),
            curve,
            marker="o",
            ms=3,
            label=f"{name} ({'pass' if v['passed'] else 'FAIL'})",
            ls="--" if v["expect"] == "down" else "-",
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("mean toy reward (share of target characters)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Learning check on toy data: reward per step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, rewards_png)

    lines = [
        "# Learning check (mechanism checks on toy data; not paper results)",
        "",
        "Direction checks: GRPO on the toy reward `toy_target_chars` through the real verl path; a run passes "
        "when the mean reward of its last k steps differs from that of its first k steps by more than the "
        "margin, upwards for each loss and downwards for the sign-flipped control.",
        "",
        "| check | loss_mode | expect | first k | last k | change | margin | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in directions.items():
        lines.append(
            f"| {name} | {v.get('loss_mode', '')} | {v['expect']} | {v['first']:.3f} | {v['last']:.3f} | "
            f"{v['delta']:+.3f} | {v['margin']} | {'pass' if v['passed'] else 'FAIL'} |"
        )
    ok = all(v["passed"] for v in directions.values())
    lines += ["", f"![toy reward curves]({Path(rewards_png).name})", ""]
    if curriculum is not None:
        ok = ok and bool(curriculum["passed"])
        lines += [
            "## Curriculum advanced by its trend",
            "",
            f"DHRCL (variant full) after SFT on a few KodCode reference solutions; trend settings "
            f"`{json.dumps(curriculum['trend'])}`, {curriculum['total_steps']} steps. Verdict: "
            f"{'pass' if curriculum['passed'] else 'FAIL'} (reached stage {curriculum['reached_stage']}).",
            "",
            "| step | from → to | kind | metric | value | slope | window | token weights |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for t in curriculum["transitions"]:
            tw = t.get("token_weights") or {}
            slope = "" if t.get("slope") is None else f"{t['slope']:+.4f}"
            value = "" if t.get("value") is None else f"{t['value']:.3f}"
            lines.append(
                f"| {t['step']} | {t['from']} → {t['to']} | {t.get('kind')} | {t.get('metric')} | {value} | "
                f"{slope} | {t.get('window')} | {tw.get('from', '')} → {tw.get('to', '')} |"
            )
        lines += ["", "| step | stage | gate in force | gate value | score |", "|---|---|---|---|---|"]
        for r in curriculum["timeline"]:
            gv = "" if r["gate_value"] is None else f"{r['gate_value']:.3f}"
            sc = "" if r["score"] is None else f"{r['score']:.3f}"
            lines.append(f"| {r['step']} | {r['stage']} | {r['gate']} | {gv} | {sc} |")
        if timeline_png is not None and curriculum["timeline"]:
            fig, ax = plt.subplots(figsize=(7, 3.5))
            steps = [r["step"] for r in curriculum["timeline"]]
            ax.step(steps, [r["stage"] for r in curriculum["timeline"]], where="post", label="stage", color="k")
            ax2 = ax.twinx()
            for key in ("a_syntax", "a_exec", "a_pass"):
                ax2.plot(
                    steps,
                    [r[key] if r[key] is not None else float("nan") for r in curriculum["timeline"]],
                    marker="o",
                    ms=3,
                    label=key,
                )
            ax.set_xlabel("training step")
            ax.set_ylabel("curriculum stage")
            ax.set_yticks([1, 2, 3])
            ax2.set_ylabel("batch-mean gate")
            ax2.set_ylim(-0.02, 1.02)
            ax.set_title("Curriculum stage timeline and reward gates")
            fig.legend(fontsize=8, loc="lower right")
            fig.tight_layout()
            save_figure(fig, timeline_png)
            lines += ["", f"![curriculum timeline]({Path(timeline_png).name})"]
    lines.append("")
    with atomic_path(out_md) as tmp:
        Path(tmp).write_text("\n".join(lines), encoding="utf-8")
    return ok

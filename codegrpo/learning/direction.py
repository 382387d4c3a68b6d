"""The direction checks of the learning checks (:mod:`codegrpo.learning`): GRPO on the toy reward
``toy_target_chars`` with each policy loss and the sign-flipped control, judged by the change of the mean reward
between the first and last ``k`` steps; and the toy data they train on."""

from __future__ import annotations

import copy
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
def short_grpo_config(cfg: Mapping[str, Any], g: Mapping[str, Any], **section: Any) -> dict:
    """A copy of the pipeline config whose ``skeleton_rl`` section is one short GRPO run of ``g``'s settings
    (``steps``, ``train_batch_size``, ``n``, ``max_prompt_length``, ``max_response_length``): no import, one
    optimiser step per training step, micro batches of the whole batch, one checkpoint at the end, no validation
    during training, verl's naive reward manager; ``section`` sets further keys of the section (or other values
    for these). The input is not mutated."""
    out = copy.deepcopy(dict(cfg))
    steps = int(g["steps"])
    batch = g["train_batch_size"]
    out["skeleton_rl"] = {
        **dict(out["skeleton_rl"]),
        "import": None,
        "train_batch_size": batch,
        "n": g["n"],
        "ppo_mini_batch_size": batch,
        "ppo_micro_batch_size_per_gpu": batch,
        "ref_log_prob_micro_batch_size_per_gpu": batch,
        "rollout_log_prob_micro_batch_size_per_gpu": batch,
        "max_prompt_length": g["max_prompt_length"],
        "max_response_length": g["max_response_length"],
        "gradient_checkpointing": False,
        "total_training_steps": steps,
        "total_epochs": steps,
        "save_freq": steps,
        "test_freq": steps + 1,
        "val_before_train": False,
        "reward": {"manager": "naive", "function": "compute_score"},
        **section,
    }
    return out


def direction_config(cfg: Mapping[str, Any]) -> dict:
    """The pipeline config whose ``skeleton_rl`` section carries the learning check's GRPO settings (no KL, no
    validation during training, one checkpoint at the end)."""
    g = cfg["learning_check"]["grpo"]
    return short_grpo_config(
        cfg, g, lr=g["lr"], ppo_mini_batch_size=g["ppo_mini_batch_size"], kl_coef=0.0, temperature=1.0
    )


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

"""Step arithmetic of verl 0.4.1's loaders and loop (see :mod:`codegrpo.budget`): batches per epoch, the epochs
verl needs for a step budget, the checkpoints a run writes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def rl_batches_per_epoch(rows: int, train_batch_size: int) -> int:
    """verl's RL train loader: ``drop_last=True`` batches of ``train_batch_size`` prompts."""
    return int(rows) // int(train_batch_size)


def sft_batches_per_epoch(rows: int, train_batch_size: int, world: int) -> int:
    """verl's SFT loader: DistributedSampler(drop_last=True) over ``world`` ranks, per-rank batches of
    ``train_batch_size // world`` with ``drop_last=True``."""
    per_rank = int(train_batch_size) // int(world)
    return (int(rows) // int(world)) // per_rank if per_rank else 0


def epochs_for_steps(total_training_steps: int | None, batches_per_epoch: int, configured_epochs: int) -> int:
    """The ``total_epochs`` verl must be given so that its loop reaches ``total_training_steps`` (null: the
    configured epochs). Never fewer than configured; ``ValueError`` when an epoch has no batch."""
    if batches_per_epoch <= 0:
        raise ValueError("the training data fills no batch")
    if total_training_steps is None:
        return int(configured_epochs)
    return max(int(configured_epochs), math.ceil(int(total_training_steps) / batches_per_epoch))


def step_plan(section: Mapping, rows: int | None, *, kind: str, world: int = 1) -> dict:
    """Steps per epoch, the epochs verl gets and the total steps of one training job."""
    bs = int(section["train_batch_size"])
    steps = section.get("total_training_steps")
    out: dict[str, Any] = {
        "rows": rows,
        "train_batch_size": bs,
        "configured_epochs": int(section["total_epochs"]),
        "total_training_steps": steps,
    }
    if rows is None:
        out.update(batches_per_epoch=None, epochs=None, total_steps=steps, reachable=None)
        return out
    bpe = rl_batches_per_epoch(rows, bs) if kind == "rl" else sft_batches_per_epoch(rows, bs, world)
    out["batches_per_epoch"] = bpe
    if bpe <= 0:
        out.update(epochs=None, total_steps=0, reachable=False)
        return out
    epochs = epochs_for_steps(steps, bpe, section["total_epochs"])
    total = int(steps) if steps is not None else bpe * epochs
    out.update(epochs=epochs, total_steps=total, reachable=bpe * epochs >= total)
    return out


def saves(total_steps: int, save_freq: int) -> int:
    """Checkpoints a run writes: every ``save_freq`` steps and at the last step."""
    if total_steps <= 0:
        return 0
    return total_steps // save_freq + (1 if total_steps % save_freq else 0)

"""verl checkpoint layout: latest step, completed steps, and the FSDP actor → Hugging Face merge and export.

verl 0.4.1 writes RL checkpoints as ``<dir>/global_step_<N>/actor/`` (sharded ``model_world_size_W_rank_R.pt``
files plus ``huggingface/`` with the config and tokenizer) and records the newest complete one in
``<dir>/latest_checkpointed_iteration.txt``. The SFT trainer writes ``<dir>/global_step_<N>/`` directly in
Hugging Face layout.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

STEP_RE = re.compile(r"^global_step_(\d+)$")
LATEST_FILE = "latest_checkpointed_iteration.txt"


def step_dirs(ckpt_dir: str | os.PathLike) -> dict[int, Path]:
    """{step: folder} for every ``global_step_<N>`` folder under ``ckpt_dir``."""
    p = Path(ckpt_dir)
    out = {}
    if p.is_dir():
        for child in p.iterdir():
            m = STEP_RE.match(child.name)
            if m and child.is_dir():
                out[int(m.group(1))] = child
    return dict(sorted(out.items()))


def latest_step(ckpt_dir: str | os.PathLike) -> int | None:
    """The step verl resumes from (``latest_checkpointed_iteration.txt``), else the highest step folder."""
    p = Path(ckpt_dir) / LATEST_FILE
    if p.is_file():
        txt = p.read_text().strip()
        if txt.isdigit():
            return int(txt)
    steps = step_dirs(ckpt_dir)
    return max(steps) if steps else None


def prune_for_resume(ckpt_dir: str | os.PathLike) -> list[int]:
    """Before a resumed run: remove every ``global_step_<N>`` folder except the one verl resumes from.

    verl 0.4.1 rotates (``max_actor_ckpt_to_keep``) only the checkpoints the running process wrote, so each
    restart would otherwise leave the previous attempt's checkpoints behind for good; folders newer than the
    resume step are incomplete saves of a killed attempt. Returns the removed steps."""
    import shutil

    keep = latest_step(ckpt_dir)
    removed = []
    for step, path in step_dirs(ckpt_dir).items():
        if step != keep:
            shutil.rmtree(path)
            removed.append(step)
    return removed


def latest_actor(ckpt_dir: str | os.PathLike) -> tuple[int, Path] | None:
    """(step, actor folder) of the latest GRPO checkpoint, or None when there is no actor checkpoint."""
    step = latest_step(ckpt_dir)
    actor = Path(ckpt_dir) / f"global_step_{step}" / "actor" if step is not None else None
    return (step, actor) if actor is not None and actor.is_dir() else None


def merge_fsdp_actor(actor_dir: str | os.PathLike, target_dir: str | os.PathLike) -> None:
    """Merge a sharded FSDP actor checkpoint into a Hugging Face folder with verl's own model merger."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    actor_dir = os.path.abspath(actor_dir)
    cfg = ModelMergerConfig(
        operation="merge",
        backend="fsdp",
        local_dir=actor_dir,
        hf_model_config_path=os.path.join(actor_dir, "huggingface"),
        target_dir=str(target_dir),
    )
    merger = FSDPModelMerger(cfg)
    merger.merge_and_save()
    merger.cleanup()


def export_hf(src: str | os.PathLike, dst: str | os.PathLike, tokenizer_from: str | os.PathLike | None = None) -> Path:
    """:func:`codegrpo.models.export_hf` with verl's FSDP merge for sharded actor checkpoints: the way a training
    stage turns what verl wrote (SFT's Hugging Face folder or RL's sharded actor) into the stage's model."""
    from codegrpo.models import export_hf as _export

    return _export(src, dst, tokenizer_from=tokenizer_from, merge_sharded=merge_fsdp_actor)

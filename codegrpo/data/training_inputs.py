"""Checks of a training stage's inputs before a launch: the parquet files (SFT ``prompt``/``response``; RL
``data_source``/``prompt``/``reward_model``, the columns :mod:`codegrpo.data.parquet` writes) and the initial model.

The trainer would fail minutes later, deep in a worker, on the same problems; these name file, row and field.
"""

from __future__ import annotations

import os
from pathlib import Path


class TrainingInputError(ValueError):
    """A training input (parquet file, initial model) is missing or malformed; the message names file, row, field."""


def files_list(files) -> list[Path]:
    return [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]


def check_parquet(files, kind: str) -> int:
    """Check SFT (``prompt``/``response`` strings) or verl RL parquet rows before a launch; return the row count.

    verl would fail minutes later, deep in a worker, on the same problems.
    """
    import pandas as pd

    total = 0
    for path in files_list(files):
        if not path.is_file():
            raise TrainingInputError(f"{path}: {kind} parquet file does not exist")
        df = pd.read_parquet(path)
        need = ["prompt", "response"] if kind == "sft" else ["data_source", "prompt", "reward_model"]
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise TrainingInputError(
                f"{path}: missing column(s) {missing} for {kind} training; columns are {list(df.columns)}"
            )
        if df.empty:
            raise TrainingInputError(f"{path}: no rows")
        for i, row in enumerate(df.itertuples(index=False)):
            where = f"{path}: row {i}"
            if kind == "sft":
                for col in need:
                    if not isinstance(getattr(row, col), str) or not getattr(row, col):
                        raise TrainingInputError(f"{where}: field {col!r} must be a non-empty string")
                continue
            msgs = row.prompt
            if (
                msgs is None
                or len(msgs) == 0
                or any(
                    not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m for m in msgs
                )
            ):
                raise TrainingInputError(f"{where}: field 'prompt' must be a list of {{role, content}} messages")
            rm = row.reward_model
            if not isinstance(rm, dict) or "ground_truth" not in rm:
                raise TrainingInputError(f"{where}: field 'reward_model' must be a dict with 'ground_truth'")
            if not isinstance(row.data_source, str) or not row.data_source:
                raise TrainingInputError(f"{where}: field 'data_source' must be a non-empty string")
        total += len(df)
    return total


def check_model(path: str) -> None:
    """A local initial model must be a Hugging Face folder; other strings are hub ids resolved by the trainer."""
    from codegrpo.models import is_hf_dir

    p = Path(os.path.expanduser(path))
    if (p.exists() or path.startswith((".", "/", "~"))) and not is_hf_dir(p):
        raise TrainingInputError(f"{p}: initial model is not a Hugging Face folder (config.json + weights)")

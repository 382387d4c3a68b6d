"""A GRPO run's resolved settings and what follows from them (the lifecycle is :func:`codegrpo.verl.stages.run_grpo`).

* :func:`run_settings` resolves a run's settings once (the section, the reward sections, the prompt format and the
  extras of its :class:`GrpoHook`); they go into the run's ``settings.json``, whose fingerprint decides resume or
  fresh start (:func:`prepare_run_dir`);
* :func:`run_services` starts the services the run needs and records their endpoints in ``settings.json``;
* :func:`settings_launch` is the verl launch of the run, whose workers read the settings through
  ``$CODEGRPO_RUN_SETTINGS`` (:func:`load_run_settings`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Mapping, Sequence

from codegrpo import runsettings
from codegrpo.data.training_inputs import files_list
from codegrpo.io import write_json
from codegrpo.runsettings import SETTINGS_ENV, SETTINGS_FILE
from codegrpo.verl.launch import fmt, grpo_launch

log = logging.getLogger(__name__)

FINISHED_FILE = "finished.json"
# config sections the rewards read, resolved into a run's settings.json (codegrpo.runsettings reads them back)
REWARD_SECTIONS = runsettings.SECTIONS
# RL stages whose reward embeds text (the embedding settings and server apply to them)
EMBEDDING_STAGES = ("skin_rl",)


class GrpoHook:
    """What a kind of GRPO run adds to the shared lifecycle of :func:`run_grpo` (DHRCL:
    :class:`codegrpo.verl.dhrcl.DhrclHook`). The default adds nothing."""

    def settings(self, cfg: Mapping, section: Mapping, run_dir: Path, init_model: str) -> dict:
        """Extra resolved settings of the run, stored under ``"extra"`` in ``settings.json``."""
        return {}

    def overrides(self, settings: Mapping, run_dir: Path) -> list[str]:
        """verl overrides appended after the section's (the last value of a Hydra key wins)."""
        return []

    def finish(self, run_dir: Path) -> dict:
        """Extra keys of ``done.json`` once training finished."""
        return {}


def load_run_settings(path: str | os.PathLike | None = None) -> dict:
    """The run's resolved settings (``settings.json``), from ``path`` or ``$CODEGRPO_RUN_SETTINGS``: how the
    trainer's plug-ins and the reward read them in verl's worker processes (:mod:`codegrpo.runsettings`)."""
    return runsettings.load(path)


def fingerprint(settings: Mapping) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prepare_run_dir(run_dir: Path, settings: Mapping) -> str:
    """Make ``run_dir`` ready for a run with ``settings``; return ``"resume"`` or ``"fresh"``.

    An unfinished run with the same resolved settings is resumed (verl picks up its newest checkpoint). A
    finished run (``finished.json``), or one whose settings differ or are unknown, is moved aside to
    ``<run>.prev-<UTC timestamp>/`` and the run starts fresh, so a forced rerun never continues an old run.
    """
    import json

    run_dir = Path(run_dir)
    want = fingerprint(settings)
    if run_dir.is_dir() and any(run_dir.iterdir()):
        old = None
        if (run_dir / SETTINGS_FILE).is_file():
            try:
                old = json.loads((run_dir / SETTINGS_FILE).read_text(encoding="utf-8")).get("fingerprint")
            except (OSError, ValueError):
                old = None
        if old == want and not (run_dir / FINISHED_FILE).exists():
            log.info("%s: resuming the unfinished run with the same settings", run_dir)
            return "resume"
        why = "finished" if (run_dir / FINISHED_FILE).exists() else "settings changed"
        aside = run_dir.with_name(f"{run_dir.name}.prev-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        n = 1
        while aside.exists():
            aside = aside.with_name(f"{aside.name.split('~')[0]}~{n}")
            n += 1
        run_dir.rename(aside)
        log.info("%s: previous run (%s) moved to %s; starting fresh", run_dir, why, aside)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / SETTINGS_FILE, {"fingerprint": want, "settings": dict(settings)})
    return "fresh"


def reward_sections(cfg: Mapping, run: str) -> dict[str, dict]:
    """The resolved ``compile_reward``, ``embedding`` and ``sandbox`` sections of run ``run`` (the config's, over
    the schema's defaults; for a stage whose reward embeds text, ``embedding`` with the stage's own overrides)."""
    from codegrpo.rewards.embedding import embedding_config

    out = {}
    for name in REWARD_SECTIONS:
        given = embedding_config(cfg, run) if name == "embedding" and run in EMBEDDING_STAGES else cfg.get(name)
        out[name] = {**runsettings.schema_defaults(name), **dict(given or {})}
    return out


def run_settings(
    cfg: Mapping,
    section: Mapping,
    run: str,
    *,
    train_files,
    val_files,
    init_model: str,
    run_dir: Path,
    extra_overrides: Sequence[str] = (),
    hook: GrpoHook | None = None,
    chat_template: str | None = None,
) -> dict:
    """The resolved settings of a GRPO run (what settings.json holds and what decides resume vs. fresh start),
    including the reward sections (:func:`reward_sections`) the reward code reads in verl's workers and the
    resolved prompt format (``chat_template``: :func:`chat_template_choice`)."""
    hook = hook or GrpoHook()
    run_dir = Path(run_dir).resolve()
    section = dict(section)
    return {
        "run": run,
        "kind": "grpo",
        "device": cfg["device"],
        "init_model": init_model,
        "section": section,
        "seed": cfg.get("seed", 0),
        "run_dir": str(run_dir),
        "train_files": [str(p.resolve()) for p in files_list(train_files)],
        "val_files": [str(p.resolve()) for p in files_list(val_files)],
        **reward_sections(cfg, run),
        "extra_overrides": list(extra_overrides),
        "chat_template": chat_template,
        "extra": hook.settings(cfg, section, run_dir, init_model),
    }


@contextlib.contextmanager
def run_services(settings: Mapping, run_dir: Path):
    """Start the services run ``settings`` needs (the embedding server of a stage whose reward embeds text,
    with ``embedding.serve: true``; the reward-model server of a DHRCL reward-model variant), record their endpoints under ``served`` in the run's settings.json before
    the trainer starts, and stop them when the block ends."""
    run_dir = Path(run_dir)
    served: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        embedding = settings.get("embedding") or {}
        if settings["run"] in EMBEDDING_STAGES and embedding.get("serve"):
            from codegrpo.services import embedding_service

            svc = stack.enter_context(embedding_service(embedding, log_path=run_dir / "embedding_server.log"))
            served["embedding"] = dict(svc.endpoint)
            log.info("%s: embedding server ready (%s)", settings["run"], svc.endpoint["api_base"])
        reward_model = (settings.get("extra") or {}).get("reward_model")
        if reward_model:  # a DHRCL reward-model variant (baseline_acecoder): its scoring server
            from codegrpo.services import reward_model_service

            svc = stack.enter_context(reward_model_service(reward_model, log_path=run_dir / "reward_model_server.log"))
            served["reward_model"] = dict(svc.endpoint)
            log.info("%s: reward-model server ready (%s)", settings["run"], svc.endpoint["api_base"])
        runsettings.write_served(run_dir / SETTINGS_FILE, served)  # also clears a previous attempt's endpoints
        yield served


def settings_launch(
    cfg: Mapping,
    settings: Mapping,
    run_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    reward_path: str | None = None,
    hook: GrpoHook | None = None,
):
    """The verl launch of a run from its resolved settings.

    Of the project's variables, the trainer's environment gets only ``$CODEGRPO_RUN_SETTINGS`` (the run's
    settings.json, read by the reward code in verl's workers); ``env`` adds variables that are not settings
    (e.g. ``RAY_ADDRESS``)."""
    hook = hook or GrpoHook()
    run_dir = Path(run_dir).resolve()
    launch = grpo_launch(
        cfg,
        settings["section"],
        settings["run"],
        train_files=settings["train_files"],
        val_files=settings["val_files"],
        model_path=settings["init_model"],
        run_dir=run_dir,
        extra_overrides=[
            *settings["extra_overrides"],
            *hook.overrides(settings, run_dir),
            f"codegrpo.chat_template={fmt(settings.get('chat_template'))}",
        ],
        reward_path=reward_path,
    )
    launch.env.update(env or {})
    launch.env[SETTINGS_ENV] = str(run_dir / SETTINGS_FILE)
    launch.drop_env = runsettings.OVERRIDE_PREFIXES
    return launch

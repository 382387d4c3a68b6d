"""Preflight: configuration problems that would otherwise surface only after a job waited in the queue
and loaded a model, caught when the workflow is planned (``snakemake -n``) and again in each training job
before it loads a model.

Every problem is reported with the config key to change and the fix; :class:`PreflightError` carries all
problems found at once. The checks:

* topology: tensor parallelism must divide the GPUs per node, and the (rollout) batch must split evenly
  over nodes x GPUs per node (:func:`check_topology`);
* batch sizes against the rows a stage really gets after split and filter (:func:`check_rows`);
* a partition under the SLURM executor (:func:`check_partition`);
* models and datasets named by hub id that are not in the run's Hugging Face cache while ``HF_HUB_OFFLINE=1``
  (:func:`check_offline`, with :mod:`codegrpo.hub`; ``snakemake prefetch`` fills the cache);
* the wandb logger without ``WANDB_API_KEY`` or ``WANDB_MODE`` (:func:`check_wandb`);
* prompt + response length over a local model's ``max_position_embeddings`` (:func:`check_lengths`);
* the installed verl must be the version the adapter is written for (:func:`check_verl_version`): verl >= 0.9
  silently ignores the reward keys this adapter writes, so a wrong version is refused before a job starts;
* a Qwen3 DHRCL model needs ``dhrcl.enable_thinking`` set (:func:`check_thinking`): the thinking mode must be
  chosen, and it is then the same in training and evaluation;
* the plan-time budget (:mod:`codegrpo.budget`): steps the data cannot supply, GPU memory over the configured
  GPU's, disk over ``cluster.scratch_quota`` (:func:`check_budget`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from codegrpo.contracts import RL_STAGES

__all__ = [
    "PreflightError",
    "check_budget",
    "check_thinking",
    "check_verl_version",
    "check_lengths",
    "check_offline",
    "check_partition",
    "check_rows",
    "check_topology",
    "check_wandb",
    "plan_checks",
    "raise_problems",
    "stage_checks",
    "training_sections",
]


class PreflightError(ValueError):
    """One or more configuration problems; ``problems`` lists them, each naming a config key and the fix."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("preflight found problems in the configuration:\n  - " + "\n  - ".join(self.problems))


def raise_problems(problems: list[str]) -> None:
    if problems:
        raise PreflightError(problems)


def training_sections(cfg: Mapping) -> dict[str, tuple[str, Mapping]]:
    """Training stage -> (config path of its settings, settings): sft, skeleton_rl, skin_rl, dhrcl — those the
    config holds (the whole config at plan time; a training job's config holds only its own sections)."""
    out: dict[str, tuple[str, Mapping]] = {}
    for stage in ("sft", *RL_STAGES):
        if isinstance(cfg.get(stage), Mapping):
            out[stage] = (stage, cfg[stage])
    if isinstance(cfg.get("dhrcl"), Mapping) and isinstance(cfg["dhrcl"].get("training"), Mapping):
        out["dhrcl"] = ("dhrcl.training", cfg["dhrcl"]["training"])
    return out


TOPOLOGY_KEYS = (
    "nnodes",
    "n_gpus_per_node",
    "tensor_model_parallel_size",
    "train_batch_size",
    "n",
    "ppo_mini_batch_size",
)


def model_sections(cfg: Mapping) -> dict[str, tuple[str, Mapping]]:
    """The DHRCL model sizes (``dhrcl.models``) whose training overrides touch the topology: ``dhrcl:<name>`` ->
    (config path of the overrides, dhrcl.training with them)."""
    d = cfg.get("dhrcl")
    if not isinstance(d, Mapping) or not isinstance(d.get("training"), Mapping):
        return {}
    return {
        f"dhrcl:{m['name']}": (f"dhrcl.models[{m['name']}].training", {**d["training"], **(m.get("training") or {})})
        for m in d.get("models") or []
        if set(m.get("training") or {}) & set(TOPOLOGY_KEYS)
    }


def _imported(stage: str, section: Mapping) -> bool:
    imp = section.get("import")
    if stage == "sft":
        return isinstance(imp, Mapping) and all(imp.get(k) for k in ("skeleton", "skin"))
    return bool(imp)


def check_topology(cfg: Mapping) -> list[str]:
    """GPU topology (nnodes x n_gpus_per_node) against tensor parallelism and batch sizes (device gpu only)."""
    if cfg["device"] == "cpu":
        return []
    problems = []
    for stage, (path, s) in {**training_sections(cfg), **model_sections(cfg)}.items():
        if _imported(stage, s):
            continue
        nodes, per_node = int(s.get("nnodes", 1)), int(s.get("n_gpus_per_node", 1))
        world = nodes * per_node
        if stage == "sft":
            if s["train_batch_size"] % world:
                problems.append(
                    f"{path}.train_batch_size = {s['train_batch_size']} does not split over {path}.nnodes x "
                    f"{path}.n_gpus_per_node = {nodes} x {per_node} GPUs; make it a multiple of {world}"
                )
            continue
        tp = int(s.get("tensor_model_parallel_size", 1))
        if per_node % tp:
            problems.append(
                f"{path}.tensor_model_parallel_size = {tp} does not divide {path}.n_gpus_per_node = {per_node}; "
                f"set a tensor parallel size that divides the GPUs per node"
            )
        rollouts = int(s["train_batch_size"]) * int(s.get("n", 1))
        if rollouts % world:
            problems.append(
                f"{path}.train_batch_size x {path}.n = {rollouts} responses do not split over {nodes} x {per_node} "
                f"GPUs ({path}.nnodes x {path}.n_gpus_per_node); make it a multiple of {world}"
            )
        mini = int(s.get("ppo_mini_batch_size", s["train_batch_size"]))
        if mini > int(s["train_batch_size"]):
            problems.append(
                f"{path}.ppo_mini_batch_size = {mini} exceeds {path}.train_batch_size = {s['train_batch_size']}; "
                f"lower ppo_mini_batch_size"
            )
        elif (mini * int(s.get("n", 1))) % world:
            problems.append(
                f"{path}.ppo_mini_batch_size x {path}.n = {mini * int(s.get('n', 1))} does not split over "
                f"{world} GPUs; make it a multiple of {world}"
            )
    return problems


def check_rows(cfg: Mapping, stage: str, rows: int, *, files: str = "") -> list[str]:
    """A stage's training rows (after split and filter) must fill at least one batch."""
    path, s = training_sections(cfg)[stage]
    problems = []
    for key in ("train_batch_size",):
        if rows < int(s[key]):
            where = f" ({files})" if files else ""
            problems.append(
                f"{path}.{key} = {s[key]} but the {stage} training data has only {rows} rows{where}; lower "
                f"{path}.{key} to at most {rows} or configure more data (datasets / kodcode)"
            )
    return problems


def check_partition(cfg: Mapping, executor: str | None) -> list[str]:
    """Under the SLURM executor a partition must be named (many sites have no usable default)."""
    if executor == "slurm" and not cfg["cluster"].get("partition"):
        return [
            "cluster.partition is unset but jobs go to SLURM (--profile slurm / --executor slurm); set "
            "cluster.partition to your site's partition (sinfo -s lists them) in a --configfile override"
        ]
    return []


def check_offline(
    cfg: Mapping, env: Mapping[str, str], *, cache_dir: str | None = None, datasets_dir: str | None = None
) -> list[str]:
    """With HF_HUB_OFFLINE=1 every model and dataset the run names by hub id must be in the run's cache.

    The ids and the cache come from :mod:`codegrpo.hub` (``hub.cache_dir`` / ``HF_HOME``; ``cache_dir`` and
    ``datasets_dir`` override the models' / datasets' cache folders); local folders are always fine.
    """
    if str(env.get("HF_HUB_OFFLINE", "")).lower() not in ("1", "true", "yes", "on"):
        return []
    from codegrpo import hub

    return hub.missing(cfg, env, cache_dir=cache_dir, datasets_dir=datasets_dir)


def base_has_template(cfg: Mapping, env: Mapping[str, str] | None = None) -> bool | None:
    """Whether the SK²Decompile base model's tokenizer has a chat template: the tiny model has one; a local folder
    is read; a hub id is read from the run's hub cache (None: not cached, unknown until the job starts)."""
    from codegrpo.verl.prompts import model_has_template

    base = str((cfg.get("model") or {}).get("base") or "tiny")
    if base == "tiny":
        return True
    from codegrpo import packaged

    name = packaged.parse_ref(base)
    if name:  # the chat models shipped in packages all carry their template (codegrpo/packaged.py)
        return True
    known = model_has_template(base)
    if known is not None:
        return known
    try:
        from huggingface_hub import try_to_load_from_cache

        from codegrpo import hub

        found = try_to_load_from_cache(base, "tokenizer_config.json", cache_dir=str(hub.hub_cache(cfg, env)))
    except Exception:  # noqa: BLE001 - not resolvable here: the training job checks it (codegrpo.verl.stages)
        return None
    if not isinstance(found, str):
        return None
    return model_has_template(Path(found).parent)


def check_chat_template(cfg: Mapping, env: Mapping[str, str] | None = None) -> list[str]:
    """SK²Decompile's SFT/RL prompt format must be decided (``model.chat_template``) when the base model's tokenizer
    has no chat template (verl 0.4.1 applies one to every prompt)."""
    from codegrpo.verl.prompts import ChatTemplateError, resolve

    sft_import = (cfg.get("sft") or {}).get("import") or {}
    if sft_import.get("skeleton") and sft_import.get("skin"):
        return []  # nothing of SK²Decompile is trained from the base model
    try:
        resolve(
            (cfg.get("model") or {}).get("chat_template"),
            base_has_template(cfg, env),
            where=str((cfg.get("model") or {}).get("base")),
        )
    except ChatTemplateError as exc:
        return [str(exc)]
    return []


def check_wandb(cfg: Mapping, env: Mapping[str, str]) -> list[str]:
    """The wandb logger needs WANDB_API_KEY (online) or WANDB_MODE (offline / disabled)."""
    if env.get("WANDB_API_KEY") or env.get("WANDB_MODE"):
        return []
    problems = []
    for stage, (path, s) in training_sections(cfg).items():
        if "wandb" in (s.get("logger") or []) and not _imported(stage, s):
            problems.append(
                f"{path}.logger includes wandb but neither WANDB_API_KEY nor WANDB_MODE is set; export "
                f"WANDB_API_KEY (or WANDB_MODE=offline), or remove wandb from {path}.logger"
            )
    return problems


def max_positions(model_dir: str | os.PathLike) -> int | None:
    """``max_position_embeddings`` from a local model's config.json (None when unknown)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        if isinstance(data.get(key), int):
            return data[key]
    return None


def check_lengths(cfg: Mapping, stage: str, model_dir: str | os.PathLike) -> list[str]:
    """Prompt + response length of a stage must fit the local model's positions."""
    limit = max_positions(model_dir)
    if limit is None:
        return []
    path, s = training_sections(cfg)[stage]
    if stage == "sft":
        if int(s["max_length"]) > limit:
            return [
                f"{path}.max_length = {s['max_length']} exceeds the {limit} positions of {model_dir} "
                f"(config.json max_position_embeddings); lower {path}.max_length to at most {limit}"
            ]
        return []
    total = int(s["max_prompt_length"]) + int(s["max_response_length"])
    if total > limit:
        return [
            f"{path}.max_prompt_length + {path}.max_response_length = {total} exceeds the {limit} positions "
            f"of {model_dir} (config.json max_position_embeddings); lower them to {limit} in total"
        ]
    return []


def check_verl_version(version: str | None = None) -> list[str]:
    """The installed verl (or ``version``) against :data:`codegrpo.verl.VERL_VERSION`."""
    from codegrpo.verl import VERL_VERSION, installed_verl_version

    found = installed_verl_version() if version is None else version
    if found != VERL_VERSION:
        return [
            f"verl {found or 'is not installed'}{'' if not found else ' is installed'}: the adapter "
            f"(codegrpo/verl/) is written for verl {VERL_VERSION} (its config keys, reward and trainer "
            f"classes; newer verl ignores some of them silently); install verl=={VERL_VERSION} "
            f"(envs/*.yaml, scripts/setup.sh)"
        ]
    return []


def check_thinking(cfg: Mapping) -> list[str]:
    """DHRCL runs from a Qwen3 model must choose the thinking mode (``dhrcl.enable_thinking``): the template's
    default is on, which the paper's response lengths do not leave room for."""
    d = cfg.get("dhrcl")
    if not isinstance(d, Mapping) or "init" not in d or d.get("enable_thinking") is not None:
        return []
    inits = [(f"dhrcl.models[{m['name']}].init", m["init"]) for m in d.get("models") or []] or [
        ("dhrcl.init", d["init"])
    ]
    for key, init in inits:
        init = init if init != "base" else (cfg.get("model") or {}).get("base", "")
        name = str(init).lower()
        if "qwen3" in name and "embedding" not in name:
            return [
                f"{key} = {init} is a Qwen3 model but dhrcl.enable_thinking is unset (the chat template "
                f"would think by default); set dhrcl.enable_thinking: false or true (used in training and "
                f"evaluation alike)"
            ]
    return []


def check_budget(cfg: Mapping) -> list[str]:
    """The plan-time budget's problems (:func:`codegrpo.budget.budget_problems`), each naming the number and the
    config key to change."""
    from codegrpo import budget

    return budget.build_budget(cfg)["problems"]


def plan_checks(cfg: Mapping, *, executor: str | None = None, env: Mapping[str, str] | None = None) -> None:
    """Every check that needs only the config and the environment; raise :class:`PreflightError`."""
    env = os.environ if env is None else env
    raise_problems(
        check_topology(cfg)
        + check_partition(cfg, executor)
        + check_offline(cfg, env)
        + check_wandb(cfg, env)
        + check_thinking(cfg)
        + check_budget(cfg)
        + check_chat_template(cfg, env)
    )


def stage_checks(
    cfg: Mapping,
    stage: str,
    *,
    rows: int,
    model_dir: str | os.PathLike,
    files: str = "",
    env: Mapping[str, str] | None = None,
) -> None:
    """A training job's checks before it loads a model: the config checks plus rows and lengths."""
    env = os.environ if env is None else env
    raise_problems(
        check_verl_version()
        + check_topology(cfg)
        + check_offline(cfg, env)
        + check_wandb(cfg, env)
        + (check_thinking(cfg) if stage == "dhrcl" else [])
        + check_rows(cfg, stage, rows, files=files)
        + check_lengths(cfg, stage, model_dir)
    )

"""What the run loads from the Hugging Face hub, and the files it loads by http(s) URL: :func:`hub_refs`,
:func:`is_hub_id`, :func:`url_sources` (see :mod:`codegrpo.hub`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from codegrpo.contracts import RL_STAGES

# config keys whose http(s) values are services, not files to fetch
_SERVICE_KEYS = ("api_base", "endpoint", "base_url")


def is_hub_id(ref: str, cfg: Mapping | None = None) -> bool:
    """``owner/name`` that is not an existing local path (nor a path under the results folder)."""
    if not isinstance(ref, str) or not ref or ref == "tiny":
        return False
    results = str((cfg or {}).get("results_dir", "results")).rstrip("/") + "/"
    if ref.startswith((".", "/", "~", results)) or Path(os.path.expanduser(ref)).exists():
        return False
    parts = ref.split("/")
    return len(parts) == 2 and all(parts)


def _dataset_sources(cfg: Mapping) -> list[tuple]:
    """(config key, id, cache_dir) of the datasets the data stages and the evaluation load with
    ``datasets.load_dataset``, where the config makes them load one from the hub."""
    out: list[tuple] = []
    data = cfg.get("data") or {}
    places = []
    if data.get("sk2d_inputs") == "generated":
        places.append(("data.generate.source", (data.get("generate") or {}).get("source") or {}))
    places.append(("data.kodcode.source", (data.get("kodcode") or {}).get("source") or {}))
    for key, src in places:
        if src.get("hub_id") and not src.get("path"):  # a path takes precedence over the hub id
            out.append((f"{key}.hub_id", src["hub_id"], src.get("cache_dir")))
    codegen = (cfg.get("evaluate") or {}).get("codegen") or {}
    for bench in ("bigcodebench_full", "bigcodebench_hard"):
        if bench in (codegen.get("benchmarks") or []) and (codegen.get(bench) or {}).get("source"):
            out.append((f"evaluate.codegen.{bench}.source", codegen[bench]["source"], None))
    return out


def _dataset_repos(cfg: Mapping) -> list[tuple]:
    """(config key, id, files) of dataset repositories whose files the evaluation downloads one by one
    (``hf_hub_download``, into the hub cache): LiveCodeBench's ``test*.jsonl`` of the configured version."""
    codegen = (cfg.get("evaluate") or {}).get("codegen") or {}
    lcb = codegen.get("livecodebench") or {}
    if "livecodebench" not in (codegen.get("benchmarks") or []) or not lcb.get("source"):
        return []
    from codegrpo.eval.suites import lcb_files

    return [("evaluate.codegen.livecodebench.source", lcb["source"], lcb_files(lcb.get("version") or "release_v6"))]


def hub_refs(cfg: Mapping) -> dict[str, list[tuple]]:
    """Every hub id the run loads, by how it is loaded; local folders and files are left out, and an id named
    twice is listed once (its first key):

    * ``models``: (config key, id), loaded with ``from_pretrained`` / vLLM / ``snapshot_download``;
    * ``datasets``: (config key, id, cache_dir or None), loaded with ``datasets.load_dataset`` (``cache_dir``:
      the source's own ``cache_dir``, else the datasets cache of ``HF_HOME``);
    * ``dataset_repos``: (config key, id, files), dataset files read with ``hf_hub_download``.
    """
    models: list[tuple[str, str]] = []
    base = (cfg.get("model") or {}).get("base")
    if base:
        models.append(("model.base", base))
    for which, value in ((cfg.get("sft") or {}).get("import") or {}).items():
        if value:
            models.append((f"sft.import.{which}", value))
    for stage in RL_STAGES:
        if (cfg.get(stage) or {}).get("import"):
            models.append((f"{stage}.import", cfg[stage]["import"]))
    dh = cfg.get("dhrcl") or {}
    if dh.get("init") and dh["init"] != "base" and not dh.get("models"):
        models.append(("dhrcl.init", dh["init"]))
    for m in dh.get("models") or []:
        if m.get("init") and m["init"] != "base":
            models.append((f"dhrcl.models[{m['name']}].init", m["init"]))
    if (dh.get("training") or {}).get("import"):
        models.append(("dhrcl.training.import", dh["training"]["import"]))
    if (dh.get("reward_model") or {}).get("model"):  # the reward-model variants' scoring server
        models.append(("dhrcl.reward_model.model", dh["reward_model"]["model"]))
    emb = cfg.get("embedding") or {}
    if emb.get("serve") and emb.get("server_model_path"):
        models.append(("embedding.server_model_path", emb["server_model_path"]))
    if emb.get("local_model_path"):  # the in-process backend loads it with local_files_only
        models.append(("embedding.local_model_path", emb["local_model_path"]))
    ev_emb = ((cfg.get("evaluate") or {}).get("decompile") or {}).get("embedding") or {}
    if ev_emb.get("local_model_path"):
        models.append(("evaluate.decompile.embedding.local_model_path", ev_emb["local_model_path"]))
    hub = cfg.get("hub") or {}
    models += [(f"hub.models[{i}]", m) for i, m in enumerate(hub.get("models") or [])]
    datasets = [(f"hub.datasets[{i}]", d, None) for i, d in enumerate(hub.get("datasets") or [])]
    datasets += _dataset_sources(cfg)

    def unique(items):
        seen, out = set(), []
        for item in items:
            ref = item[1]
            if ref not in seen and is_hub_id(ref, cfg):
                seen.add(ref)
                out.append(tuple(item))
        return out

    return {
        "models": unique(models),
        "datasets": unique(datasets),
        "dataset_repos": unique(_dataset_repos(cfg)),
        "urls": url_sources(cfg),
    }


def url_sources(cfg: Mapping) -> list[tuple[str, str]]:
    """(config key, URL) of every file the data stages and the evaluation would download by http(s) URL.

    Every http(s) string under ``data``, ``datasets`` and ``evaluate`` counts, except service addresses
    (``api_base`` ...), sections with ``enabled: false`` and code-generation benchmarks not in
    ``evaluate.codegen.benchmarks``."""
    out: list[tuple[str, str]] = []
    codegen = (cfg.get("evaluate") or {}).get("codegen") or {}
    unused = {
        f"evaluate.codegen.{k}"
        for k, v in codegen.items()
        if isinstance(v, Mapping) and "source" in v and k not in (codegen.get("benchmarks") or [])
    }

    def walk(node, key):
        if isinstance(node, Mapping):
            if node.get("enabled") is False or key in unused:
                return
            for k, v in node.items():
                if str(k) not in _SERVICE_KEYS:
                    walk(v, f"{key}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")
        elif isinstance(node, str) and node.startswith(("http://", "https://")):
            out.append((key, node))

    for section in ("data", "datasets", "evaluate"):
        walk(cfg.get(section) or {}, section)
    seen: set[str] = set()
    return [(k, u) for k, u in out if not (u in seen or seen.add(u))]

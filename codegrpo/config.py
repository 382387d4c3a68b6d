"""Load and validate a pipeline config outside Snakemake (tests, scripts, notebooks).

The workflow validates the same file with ``snakemake.utils.validate`` in ``rules/common.smk``; both use
``schemas/config.schema.yaml`` and fill in its defaults.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = REPO_ROOT / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A config file does not match the schema; the message names the file and the key path."""


def _extend_with_default(validator_class):
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_Validator = _extend_with_default(jsonschema.Draft202012Validator)


def load_schema() -> dict:
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def validate_config(cfg: dict, source: str = "<config>") -> dict:
    """Validate ``cfg`` in place (defaults filled in) and return it; raise ConfigError on the first problem."""
    errors = sorted(_Validator(load_schema()).iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        msgs = []
        for err in errors:
            where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
            msgs.append(f"{source}: {where}: {err.message}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(msgs))
    from codegrpo.eval.protocols import apply_codegen_protocol

    try:
        apply_codegen_protocol(cfg)  # a named evaluation protocol replaces the keys it sets
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return cfg


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (plain YAML keeps the last one silently)."""


def _construct_mapping(loader, node, deep=False):
    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor` merges (explicit keys may override merged ones)
        key = (key_node.tag, key_node.value)
        if key in seen:
            raise ConfigError(
                f"line {key_node.start_mark.line + 1}: key {key_node.value!r} is given twice in the same "
                f"mapping (first on line {seen[key] + 1})"
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def input_files(cfg: dict) -> list[tuple[str, str]]:
    """The input files a config names, as (key path, file path) pairs: every dataset's ``path``, the KodCode
    files (``data/kodcode/paths``) and, when the data stages read generated files, the generation source file
    and the decontamination sets (``data/generate``)."""
    out: list[tuple[str, str]] = []
    for name, ds in (cfg.get("datasets") or {}).items():
        if isinstance(ds, dict) and isinstance(ds.get("path"), str):
            out.append((f"datasets/{name}/path", ds["path"]))
    kod = ((cfg.get("data") or {}).get("kodcode") or {}).get("paths") or []
    for i, p in enumerate(kod):
        if isinstance(p, str):
            out.append((f"data/kodcode/paths/{i}", p))
    data = cfg.get("data") or {}
    kc = data.get("kodcode") or {}
    if isinstance((kc.get("source") or {}).get("path"), str):
        out.append(("data/kodcode/source/path", kc["source"]["path"]))
    for i, ent in enumerate(kc.get("decontaminate") or []):
        if isinstance(ent, dict) and isinstance(ent.get("path"), str):
            out.append((f"data/kodcode/decontaminate/{i}/path", ent["path"]))
    if data.get("sk2d_inputs") == "generated":
        gen = data.get("generate") or {}
        src = (gen.get("source") or {}).get("path")
        if isinstance(src, str):
            out.append(("data/generate/source/path", src))
        for i, ent in enumerate(gen.get("decontaminate") or []):
            if isinstance(ent, dict) and isinstance(ent.get("path"), str):
                out.append((f"data/generate/decontaminate/{i}/path", ent["path"]))
    return out


def check_input_files(cfg: dict, source: str = "<config>", base_dir: str | Path | None = None) -> None:
    """Raise ConfigError naming the key path of every configured input file that is missing or not a regular
    readable file. Relative paths are taken from ``base_dir`` (default: the workflow directory)."""
    base = Path(base_dir) if base_dir is not None else REPO_ROOT
    msgs = []
    for where, p in input_files(cfg):
        full = Path(p) if Path(p).is_absolute() else base / p
        if not full.exists():
            msgs.append(f"{source}: {where}: file not found: {full}")
        elif not full.is_file():
            msgs.append(f"{source}: {where}: not a regular file: {full}")
        elif not os.access(full, os.R_OK):
            msgs.append(f"{source}: {where}: file not readable: {full}")
    if msgs:
        raise ConfigError("invalid config:\n  " + "\n  ".join(msgs))


def load_config(
    path: str | Path, overrides: dict | None = None, check_files: bool = True, base_dir: str | Path | None = None
) -> dict[str, Any]:
    """Read, validate (defaults filled in) and return the config at ``path``.

    Every problem is a :class:`ConfigError` whose message names the file and the key path: a missing or
    unreadable file, text that is not UTF-8 YAML, an empty file, a top level that is not a mapping, a key given
    twice, a schema violation, and (``check_files``) a configured input file that does not exist.
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a YAML config (not UTF-8 text: {exc})") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror or exc})") from exc
    try:
        cfg = yaml.load(text, Loader=_StrictLoader)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if cfg is None:
        raise ConfigError(f"{path}: the config file is empty")
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(cfg).__name__}")
    if overrides:
        cfg.update(overrides)
    validate_config(cfg, str(path))
    if check_files:
        check_input_files(cfg, str(path), base_dir)
    return cfg


def merge_layers(base: dict, layer: Mapping) -> dict:
    """Snakemake's merge of config files into ``base`` (in place, returned): mappings key by key, recursively;
    anything else (lists included) replaced by the later file's value."""
    for key, val in layer.items():
        if isinstance(val, Mapping) and isinstance(base.get(key), dict):
            merge_layers(base[key], val)
        else:
            base[key] = val
    return base

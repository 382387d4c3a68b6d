"""Load and validate a pipeline config outside Snakemake (tests, scripts, notebooks).

The workflow validates the same file with ``snakemake.utils.validate`` in ``rules/common.smk``; both use
``schemas/config.schema.yaml`` and fill in its defaults.
"""

from __future__ import annotations

import copy
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
    return cfg


def load_config(path: str | Path, overrides: dict | None = None) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(cfg).__name__}")
    if overrides:
        cfg.update(overrides)
    return validate_config(cfg, str(path))

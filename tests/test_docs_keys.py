"""Every config key the documentation names exists in the schema.

A user copies keys from README.md and docs/*.md into a site file; a key the schema does not know fails
validation (every section is closed), so a doc that names a key which is not there sends a user into an error.
The check reads every backticked dotted name whose first part is a top-level config section (``cluster.partition``,
``evaluate.codegen.<benchmark>.source``) and resolves it through the schema; ``<...>`` and ``*`` parts stand for
any key of that mapping. File names (``smoke.py``) are not keys.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import REPO_ROOT

SCHEMA = yaml.safe_load((REPO_ROOT / "schemas" / "config.schema.yaml").read_text())
DOCS = sorted([*(REPO_ROOT / "docs").glob("*.md"), REPO_ROOT / "README.md"])
KEY = re.compile(r"`([a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_<>*\-]+)+)`")
FILE_SUFFIX = re.compile(r"\.(py|md|json|jsonl|yaml|yml|smk|sh|txt|csv|tex|html|safetensors|gguf|parquet|log)$")
WILDCARD = re.compile(r"<[^>]*>|\*")


def _deref(node: dict) -> dict:
    """A schema node with its ``$ref`` merged in (the referring node's properties override the definition's)."""
    while isinstance(node, dict) and "$ref" in node:
        target = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        merged["properties"] = {**target.get("properties", {}), **node.get("properties", {})}
        node = merged
    return node


def _children(node: dict, part: str) -> list[dict]:
    node = _deref(node)
    props = node.get("properties", {})
    extra = node.get("additionalProperties")
    if WILDCARD.fullmatch(part):
        return [*props.values(), *([extra] if isinstance(extra, dict) else [])]
    if part in props:
        return [props[part]]
    if isinstance(extra, dict):
        return [extra]
    if extra is None and not props and "object" in (node.get("type") or []):
        return [{}]  # an open mapping (no listed keys): anything goes below it
    return []


def resolves(key: str) -> bool:
    nodes = [SCHEMA]
    for part in key.split("."):
        nodes = [c for n in nodes for c in _children(n, part)]
        if not nodes:
            return False
    return True


def doc_keys() -> list[tuple[str, int, str]]:
    tops = set(SCHEMA["properties"])
    out = []
    for path in DOCS:
        for ln, line in enumerate(path.read_text().splitlines(), 1):
            for m in KEY.finditer(line):
                key = m.group(1)
                if key.split(".")[0] in tops and not FILE_SUFFIX.search(key):
                    out.append((str(path.relative_to(REPO_ROOT)), ln, key))
    return out


def test_the_docs_name_config_keys():
    keys = doc_keys()
    assert len(keys) > 100, "the docs' key pattern no longer finds the keys (the check would pass on nothing)"


def test_resolver_knows_real_and_unknown_keys():
    assert resolves("cluster.partition") and resolves("skeleton_rl.import") and resolves("dhrcl.seeds")
    assert resolves("cluster.stages.evaluate.runtime")
    assert not resolves("cluster.resources.evaluate.runtime") and not resolves("skeleton_rl.imports")
    assert not resolves("data.seed")


@pytest.mark.parametrize("path", [str(p.relative_to(REPO_ROOT)) for p in DOCS])
def test_every_key_a_document_names_is_in_the_schema(path):
    bad = [f"{f}:{ln}: `{key}`" for f, ln, key in doc_keys() if f == path and not resolves(key)]
    assert not bad, "keys the schema does not have:\n" + "\n".join(bad)


def test_site_example_is_a_valid_layer_over_the_paper_config():
    """site.yaml.example, merged key by key over config/paper.yaml as Snakemake merges config files, validates,
    and its stages resolve to SLURM requests (whole nodes for training, the CPU partition for CPU jobs)."""
    from codegrpo.cluster.resources import stage_resources
    from codegrpo.config import merge_layers, validate_config

    paper = yaml.safe_load((REPO_ROOT / "config" / "paper.yaml").read_text())
    site = yaml.safe_load((REPO_ROOT / "site.yaml.example").read_text())
    site["cluster"]["cpu_partition"] = "cpu"
    cfg = validate_config(merge_layers(paper, site), "config/paper.yaml + site.yaml.example")
    assert stage_resources(cfg, "skeleton_rl")["slurm_extra"] == "--exclusive"
    assert stage_resources(cfg, "data")["slurm_partition"] == "cpu"
    assert stage_resources(cfg, "evaluate")["slurm_partition"] == "gpu"

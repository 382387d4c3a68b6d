"""envs/*.yaml (conda environments for clusters) must pin exactly what pyproject.toml pins."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
ENV_FILES = sorted((REPO / "envs").glob("*.yaml"))


def _norm(req: str) -> tuple[str, str, str]:
    r = Requirement(req)
    return canonicalize_name(r.name), str(r.specifier), ",".join(sorted(r.extras))


def _pyproject() -> dict:
    with open(REPO / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]


def _pip_section(env: dict, path: Path) -> list[str]:
    for dep in env.get("dependencies", []):
        if isinstance(dep, dict) and "pip" in dep:
            return [str(x) for x in dep["pip"]]
    raise AssertionError(f"{path}: no `pip:` section under dependencies")


def test_env_files_exist():
    assert [p.name for p in ENV_FILES] == ["codegrpo.yaml"]


@pytest.mark.parametrize("path", ENV_FILES, ids=lambda p: p.name)
def test_pip_pins_equal_pyproject(path):
    project = _pyproject()
    expected = project["dependencies"] + project["optional-dependencies"]["gpu"]
    with open(path, encoding="utf-8") as fh:
        env = yaml.safe_load(fh)
    pins = _pip_section(env, path)
    got = sorted(_norm(p) for p in pins)
    want = sorted(_norm(p) for p in expected)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, (
        f"{path.name} differs from pyproject.toml: missing {missing}, not in pyproject {extra}"
    )
    assert len(got) == len(set(got)), f"{path.name}: a requirement is listed twice"


@pytest.mark.parametrize("path", ENV_FILES, ids=lambda p: p.name)
def test_python_matches_requires_python(path):
    with open(path, encoding="utf-8") as fh:
        env = yaml.safe_load(fh)
    pythons = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert len(pythons) == 1, f"{path.name}: pin python exactly once"
    version = pythons[0].split("=", 1)[1].lstrip("=")
    assert version in SpecifierSet(_pyproject()["requires-python"]), pythons[0]


def test_gpu_extra_pins_vllm_for_verl():
    # verl 0.4.1 supports vLLM up to 0.8.5; the gpu extra and the conda env must not drift above it.
    (vllm,) = [Requirement(r) for r in _pyproject()["optional-dependencies"]["gpu"]
               if canonicalize_name(Requirement(r).name) == "vllm"]
    assert "0.8.5" in vllm.specifier and "0.8.6" not in vllm.specifier


def test_post_deploy_script_installs_the_package():
    script = REPO / "envs" / "codegrpo.post-deploy.sh"
    assert os.access(script, os.X_OK), "Snakemake runs the post-deploy script; it must be executable"
    assert "pip install --no-deps -e" in script.read_text()

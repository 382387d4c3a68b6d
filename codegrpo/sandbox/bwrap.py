"""The namespace layer: what the sandbox can see, the ``bwrap`` command line, and which isolation is available.

Every supervisor runs under ``bwrap`` with new network, PID, IPC, UTS (and, when possible, cgroup) namespaces,
``--die-with-parent`` and ``--new-session``. The filesystem is the host's, bound read-only, except:

* ``/tmp``, ``/dev/shm`` and ``/run`` are replaced by empty tmpfs that only root may write (:data:`MASKED_DIRS`);
* every *closed* directory (no search permission for others, e.g. a home directory of mode 0700) on the way to
  something the supervisor needs is replaced by an empty tmpfs, so the rest of it (keys, tokens) stays
  invisible;
* what the supervisor needs (:func:`needed_paths`: the interpreter, its installation and virtual environment,
  this package) is bound back read-only into those tmpfs, with parents created mode 0755 so that the job's
  private uid can traverse them;
* the supervisor's workspace is bound read-write.

The interpreter is started by the path :func:`interpreter` returns: ``sys.executable`` with its directories
resolved (a virtual environment reached through a symbolic link that lies in a closed home directory is
started from the link's target, which the sandbox can see). Any symbolic link still on the way to the
interpreter or the supervisor's files (:func:`lookups`) that a tmpfs would hide is bound back as well, and
:func:`check_reachable` refuses to start a supervisor whose files are not all visible, naming the path.

Standard library only.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from codegrpo.sandbox.types import SandboxError, SandboxInfo

__all__ = [
    "MASKED_DIRS",
    "PACKAGE_DIR",
    "SUPERVISOR_FILES",
    "MountPlan",
    "interpreter",
    "lookups",
    "needed_paths",
    "plan_mounts",
    "hidden_by",
    "check_reachable",
    "bwrap_argv",
    "sandbox_info",
]

log = logging.getLogger(__name__)

# Replaced by an empty tmpfs in every sandbox (the job's private /tmp, /dev/shm, /run).
MASKED_DIRS = ("/tmp", "/dev/shm", "/run")

# codegrpo/: the supervisor runs sandbox/supervisor.py and loads sandbox/processes.py, sandbox/pytest_driver.py and
# procgroup.py by path; pytest_driver.py loads sandbox/rpc.py, which loads its parts (rpc.PARTS), by path.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
SUPERVISOR_FILES = {
    "sandbox supervisor": os.path.join(PACKAGE_DIR, "sandbox", "supervisor.py"),
    "sandbox job processes": os.path.join(PACKAGE_DIR, "sandbox", "processes.py"),
    "sandbox pytest driver": os.path.join(PACKAGE_DIR, "sandbox", "pytest_driver.py"),
    "sandbox solution boundary": os.path.join(PACKAGE_DIR, "sandbox", "rpc.py"),
    "sandbox boundary rules": os.path.join(PACKAGE_DIR, "sandbox", "rpc_rules.py"),
    "sandbox boundary proxies": os.path.join(PACKAGE_DIR, "sandbox", "rpc_proxy.py"),
    "sandbox boundary endpoint": os.path.join(PACKAGE_DIR, "sandbox", "rpc_endpoint.py"),
    "process-group helper": os.path.join(PACKAGE_DIR, "procgroup.py"),
}

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_MAX_LINKS = 40  # the kernel's own limit on symbolic links in one lookup


# ---------------------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------------------
def interpreter(executable: str | None = None) -> str:
    """The Python to start in the sandbox: ``sys.executable`` with its *directories* resolved.

    The last component is kept as it is: a virtual environment's ``bin/python`` is a link to the base
    interpreter, and Python finds ``pyvenv.cfg`` next to the path it was started as, so starting the link keeps
    the environment. Resolving the directories avoids looking up a link that lies in a directory the sandbox
    hides (a virtual environment linked from a mode-0700 home to a scratch disk).
    """
    exe = os.path.abspath(executable or sys.executable)
    return os.path.join(os.path.realpath(os.path.dirname(exe)), os.path.basename(exe))


def lookups(path: str) -> list[str]:
    """Every path the kernel looks up to open ``path``: each symbolic link met on the way, then the file itself.

    Each of them must be visible in the sandbox for ``exec``/``open`` to succeed there.
    """
    out: list[str] = []
    pending = list(Path(os.path.abspath(path)).parts[1:])
    cur, links = "/", 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, part)
        if os.path.islink(nxt):
            links += 1
            if links > _MAX_LINKS:
                raise SandboxError(f"too many symbolic links on the way to {path}")
            out.append(nxt)
            target = os.readlink(nxt)
            if os.path.isabs(target):
                cur = "/"
            pending[:0] = [p for p in Path(target).parts if p != "/"]
            continue
        cur = nxt
    out.append(cur)
    return out


def needed_paths() -> list[str]:
    """Directories the supervisor and the job's interpreter must read (Python installation, virtual environment,
    site-packages directories a .pth file adds, this package), resolved."""
    exe = interpreter()
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(exe)), PACKAGE_DIR}
    # site-packages directories on sys.path that live elsewhere (added by a .pth file of the environment)
    paths.update(
        p
        for p in sys.path
        if p and os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages") and os.path.isdir(p)
    )
    return sorted({os.path.realpath(p) for p in paths if p})


def _world_traversable(path: str) -> bool:
    cur = "/"
    for part in Path(path).parts[1:]:
        cur = os.path.join(cur, part)
        try:
            if not os.stat(cur).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _closed_ancestors(needed: Iterable[str]) -> list[tuple[str, list[str]]]:
    """(closed dir, needed paths under it): e.g. a Python under /root (mode 0700) that the job uid must read."""
    out: dict[str, list[str]] = {}
    for path in needed:
        cur = "/"
        for part in Path(path).parts[1:]:
            cur = os.path.join(cur, part)
            try:
                closed = not os.stat(cur).st_mode & 0o001
            except OSError:
                break
            if closed and cur != path:
                out.setdefault(cur, []).append(path)
                break
    return sorted(out.items())


# ---------------------------------------------------------------------------------------------------------
# Mount plan
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MountPlan:
    """What the sandbox hides and what it binds back, in mount order."""

    tmpfs: tuple[str, ...]  # directories replaced by an empty tmpfs
    binds: tuple[tuple[str, str], ...]  # (the tmpfs it lies in, path) bound back read-only at the same path


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def plan_mounts(needed: Iterable[str] | None = None, reach: Iterable[str] | None = None) -> MountPlan:
    """The mounts for ``needed`` directories (default :func:`needed_paths`) and the lookups of the files in
    ``reach`` (default: the interpreter and :data:`SUPERVISOR_FILES`): any of those a tmpfs would hide is bound
    back (a symbolic link is bound as what it points to, at the link's own path)."""
    needed = sorted(needed_paths() if needed is None else needed)
    needed = [p for p in needed if not any(q != p and _under(p, q) for q in needed)]  # inside another: bound with it
    if reach is None:
        reach = [interpreter(), *SUPERVISOR_FILES.values()]
    tmpfs: list[str] = list(MASKED_DIRS)
    binds: list[tuple[str, str]] = []
    bound: set[str] = set()
    for closed, paths in _closed_ancestors(needed):
        tmpfs.append(closed)
        for path in paths:
            binds.append((closed, path))
            bound.add(path)
    # The interpreter, the virtual environment or this package may live under a masked dir (a checkout or a
    # venv in /tmp): bind them back, read-only, into the fresh tmpfs.
    for path in needed:
        top = next((m for m in MASKED_DIRS if _under(path, m) and path != m), None)
        if top and path not in bound:
            binds.append((top, path))
            bound.add(path)
    plan = MountPlan(tuple(tmpfs), tuple(binds))
    extra: list[tuple[str, str]] = []
    for target in reach:
        for hop in lookups(target):
            top = hidden_by(hop, plan)
            if top and hop not in bound:
                extra.append((top, hop))
                bound.add(hop)
    return MountPlan(plan.tmpfs, plan.binds + tuple(extra))


def hidden_by(path: str, plan: MountPlan) -> str | None:
    """The tmpfs that hides ``path`` inside the sandbox, or None when the sandbox sees it (as the host does)."""
    tops = [t for t in plan.tmpfs if _under(path, t)]
    if not tops:
        return None
    top = max(tops, key=len)  # the innermost tmpfs decides
    if path == top:
        return None
    for btop, bpath in plan.binds:
        if _under(btop, top) and (_under(path, bpath) or _under(bpath, path)):
            return None  # bound back, or a parent created for a bind
    return top


def check_reachable(plan: MountPlan, files: Mapping[str, str]) -> None:
    """Raise :class:`SandboxError` naming the first of ``files`` (what -> path) the sandbox cannot reach."""
    for what, path in files.items():
        if not os.path.exists(path):
            raise SandboxError(f"{what} {path} does not exist")
        for hop in lookups(path):
            top = hidden_by(hop, plan)
            if top:
                via = "" if hop == path else f" (reached through {hop})"
                raise SandboxError(
                    f"{what} {path} is not reachable inside the sandbox{via}: {top} is an empty "
                    f"tmpfs there and {hop} is not bound back"
                )


def _bind_back(argv: list[str], top: str, path: str, made: set[str]) -> None:
    """Bind ``path`` read-only inside ``top`` (a fresh tmpfs), creating its parents there with mode 0755
    (bwrap would create missing parents with mode 0700, which the job uid could not traverse)."""
    cur = top
    for part in Path(path).relative_to(top).parts[:-1]:
        cur = os.path.join(cur, part)
        if cur not in made:
            argv += ["--perms", "0755", "--dir", cur]
            made.add(cur)
    argv += ["--ro-bind", path, path]
    made.add(path)


def bwrap_argv(workspace: str, plan: MountPlan | None = None) -> list[str]:
    """``bwrap`` and its options (up to, not including, ``--``) for a supervisor working in ``workspace``."""
    plan = plan or plan_mounts()
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    made: set[str] = set()
    binds_in: dict[str, list[str]] = {}
    for top, path in plan.binds:
        binds_in.setdefault(top, []).append(path)
    for top in plan.tmpfs:  # each tmpfs, then what is bound back into it
        argv += ["--perms", "0755", "--tmpfs", top]
        made.add(top)
        for path in binds_in.get(top, []):
            _bind_back(argv, top, path, made)
    argv += ["--bind", workspace, workspace, "--chdir", workspace]
    if os.geteuid() == 0:
        # Root: keep only what the supervisor needs to prepare job directories and drop to the job uid.
        argv += ["--cap-drop", "ALL"]
        for cap in (
            "CAP_SETUID",
            "CAP_SETGID",
            "CAP_CHOWN",
            "CAP_DAC_OVERRIDE",
            "CAP_FOWNER",
            "CAP_KILL",
            "CAP_SYS_RESOURCE",
        ):
            argv += ["--cap-add", cap]
    else:
        argv += ["--unshare-user"]
    return argv


# ---------------------------------------------------------------------------------------------------------
# Mechanism detection
# ---------------------------------------------------------------------------------------------------------
_INFO: SandboxInfo | None = None
_INFO_LOCK = threading.Lock()


def sandbox_info() -> SandboxInfo:
    """Detect (once) which isolation is available here, and log the decision."""
    global _INFO
    with _INFO_LOCK:
        if _INFO is not None:
            return _INFO
        private_uid = os.geteuid() == 0
        forced = os.environ.get("CODEGRPO_SANDBOX_MECHANISM", "").strip().lower()
        mech, reason = "rlimits", ""
        if forced == "rlimits":
            reason = "CODEGRPO_SANDBOX_MECHANISM=rlimits"
        elif not shutil.which("bwrap"):
            reason = "bwrap not found on PATH (install the Debian package bubblewrap)"
        else:
            ws = tempfile.mkdtemp(prefix="codegrpo-sbx-probe-")
            try:
                proc = subprocess.run(
                    bwrap_argv(ws) + ["--", "/bin/true"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    env={"PATH": _SAFE_PATH, "LANG": "C.UTF-8"},
                )
                if proc.returncode == 0:
                    mech, reason = "bwrap", "bwrap namespaces available"
                else:
                    reason = f"bwrap cannot create namespaces here: {proc.stderr.strip()[:300]}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                reason = f"bwrap probe failed: {exc}"
            finally:
                shutil.rmtree(ws, ignore_errors=True)
        if forced == "bwrap" and mech != "bwrap":
            raise SandboxError(f"CODEGRPO_SANDBOX_MECHANISM=bwrap but {reason}")
        if not private_uid:
            reason += "; not root, so no private uid per job (processes tracked by session/PID namespace)"
        elif mech != "bwrap" and not all(_world_traversable(p) for p in needed_paths()):
            private_uid = False
            reason += (
                "; the Python installation is not readable by other uids and there is no mount namespace"
                " to expose it, so no private uid per job"
            )
        _INFO = SandboxInfo(mech, private_uid, reason)
        level = logging.INFO if mech == "bwrap" and private_uid else logging.WARNING
        log.log(level, "sandbox: mechanism=%s private_uid=%s (%s)", mech, private_uid, reason)
        return _INFO

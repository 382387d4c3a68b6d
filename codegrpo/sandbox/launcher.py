"""One sandbox supervisor process, seen from the host: start it, send it a job, read its reply, stop it.

Used by the pool (:class:`codegrpo.sandbox.client.Sandbox`). A supervisor (:mod:`codegrpo.sandbox.supervisor`) is
started under ``bwrap`` when available (:mod:`codegrpo.sandbox.bwrap`, which refuses first, naming the path, a
sandbox that could not see its interpreter or files) with :func:`codegrpo.procgroup.popen_group`, and stopped with
``stop_group``. Its stderr is kept in a temporary file: when it dies without answering, the error carries its exit
status and the end of that stderr. Each reply must carry its request's random id, else the supervisor is dropped.

Standard library (and :mod:`codegrpo.procgroup`) only.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time

from codegrpo.procgroup import popen_group, stop_group
from codegrpo.sandbox import bwrap
from codegrpo.sandbox.types import SandboxError, SandboxInfo

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_STDERR_TAIL = 2000  # bytes of a dead supervisor's stderr quoted in the error


def supervisor_env(interp: str, pidns: bool, private_uid: bool) -> dict[str, str]:
    env = {
        "CODEGRPO_SANDBOX_UID": "1" if private_uid else "0",
        "PATH": f"{os.path.dirname(interp)}:{_SAFE_PATH}",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "HOME": "/nonexistent",
    }
    if pidns:
        env["CODEGRPO_SANDBOX_PIDNS"] = "1"
    return env


class JobLost(SandboxError):
    """A working sandbox lost its supervisor during one job on every attempt (the job killed it, or wrote
    into its reply pipe): that job scores 0, the others go on."""


class SupervisorProcess:
    """One supervisor process; it runs jobs one at a time (fork server) or exactly one (fresh)."""

    def __init__(self, info: SandboxInfo, oneshot: bool):
        self.info = info
        self.oneshot = oneshot
        self.proc: subprocess.Popen | None = None
        self.workspace: str | None = None
        self.lock = threading.Lock()
        self._buf = b""
        self._stderr = None  # the supervisor's stderr (a host temporary file)

    def command(self, workspace: str) -> list[str]:
        """The supervisor's command line; refuses (SandboxError naming the path) what the sandbox cannot reach."""
        interp = bwrap.interpreter()
        files = {"Python interpreter": interp, **bwrap.SUPERVISOR_FILES}
        py = [
            interp,
            "-I",
            bwrap.SUPERVISOR_FILES["sandbox supervisor"],
            "--oneshot" if self.oneshot else "--serve",
            workspace,
        ]
        if self.info.mechanism != "bwrap":
            for what, path in files.items():
                if not os.path.exists(path):
                    raise SandboxError(f"{what} {path} does not exist")
            return py
        plan = bwrap.plan_mounts()
        bwrap.check_reachable(plan, files)
        return bwrap.bwrap_argv(workspace, plan) + ["--"] + py

    def start(self) -> None:
        base = os.environ.get("CODEGRPO_SANDBOX_DIR") or None
        if base:
            os.makedirs(base, exist_ok=True)
        self.workspace = tempfile.mkdtemp(prefix="codegrpo-sbx-", dir=base)
        os.chmod(self.workspace, 0o711)
        try:
            argv = self.command(self.workspace)
        except BaseException:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None
            raise
        self._stderr = tempfile.TemporaryFile(prefix="codegrpo-sbx-stderr-")
        env = supervisor_env(bwrap.interpreter(), self.info.mechanism == "bwrap", self.info.private_uid)
        self.proc = popen_group(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=self.workspace,
            close_fds=True,
        )
        self._buf = b""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _died(self, what: str) -> SandboxError:
        """The error for a supervisor that is gone: ``what``, its exit status and the end of its stderr."""
        proc = self.proc
        status = None
        if proc is not None:
            try:
                status = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        tail = ""
        if self._stderr is not None:
            try:
                self._stderr.seek(0, os.SEEK_END)
                size = self._stderr.tell()
                self._stderr.seek(max(0, size - _STDERR_TAIL))
                tail = self._stderr.read().decode("utf-8", "replace").strip()
            except (OSError, ValueError):
                pass
        self.close()
        msg = what + (f" (exit status {status})" if status is not None else "")
        return SandboxError(msg + (f": {tail}" if tail else ": it wrote nothing on stderr"))

    def request(self, req: dict, timeout_s: float) -> dict:
        """Send one job; its reply must carry the request's random id (else the supervisor is dropped: a job
        sharing its uid may have written into its pipe, and every later reply could be shifted)."""
        if not self.alive():
            self.start()
        rid = os.urandom(16).hex()
        req = dict(req, rid=rid)
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise self._died(f"sandbox supervisor died before the job ({exc})") from exc
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise SandboxError(f"sandbox supervisor gave no answer within {timeout_s:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise self._died("sandbox supervisor exited without an answer")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        if self.oneshot:
            self.close()
        try:
            resp = json.loads(line)
        except ValueError:
            resp = None
        if not isinstance(resp, dict) or resp.get("rid") != rid or self._buf:
            self.close()
            raise SandboxError("sandbox supervisor answered with another request's id (or garbage); restarted")
        return resp

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                if proc.stdin:
                    proc.stdin.close()
            except OSError:
                pass
            stop_group(proc, grace_s=5.0, term=None)  # EOF on stdin asks it to finish
            if proc.stdout:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self.workspace:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None

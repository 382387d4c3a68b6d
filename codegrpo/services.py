"""Lifecycle of helper services a training job needs (the embedding server of the identifier reward).

:class:`ManagedService` starts a command in its own process group, waits until an HTTP URL answers 200 (with a
timeout; an early exit is reported with the tail of the service's log), and stops the whole process group
(SIGTERM, then SIGKILL) when the job ends — it is a context manager and is also stopped at interpreter exit.

:func:`embedding_service` builds one from the config's ``embedding`` section: on GPU nodes the configured
``server_command`` (vLLM's OpenAI server), on CPU the project's own server (:mod:`codegrpo.embed_server`).
Everything binds to 127.0.0.1. ``service.endpoint`` (backend, api_base, model) points the reward at it: a
training run writes it into its settings.json before the trainer starts; outside a training run, pass it as
explicit embedding settings (``service.env`` holds the same as ``CODEGRPO_EMBEDDING_*`` variables).

    with embedding_service(cfg["embedding"], log_path="logs/.../embed.log") as svc:
        get_embedder({**settings, **svc.endpoint})
"""

from __future__ import annotations

import atexit
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any, Mapping, Sequence

from codegrpo.procgroup import popen_group, stop_group

LOOPBACK = "127.0.0.1"
DEFAULT_SERVER_COMMAND = "{python} -m codegrpo.embed_server --host {host} --port {port} --served-model-name {model}"
RM_SERVER_COMMAND = (
    "{python} -m codegrpo.rm_server --host {host} --port {port} --model-path {model_path} "
    "--served-model-name {model} --value-head-prefix {value_head_prefix} --dtype {dtype} "
    "--device {device} --max-length {max_length} --batch-size {batch_size}"
)


class ServiceError(RuntimeError):
    """A service did not start, did not become ready in time, or died."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_LIVE: "weakref.WeakSet[ManagedService]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for svc in list(_LIVE):
        try:
            svc.stop()
        except Exception:
            pass


class ManagedService:
    def __init__(
        self,
        command: Sequence[str],
        ready_url: str,
        ready_timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
        name: str = "service",
        cwd: str | None = None,
        exports: Mapping[str, str] | None = None,
    ):
        self.command = [str(c) for c in command]
        self.ready_url = ready_url
        self.ready_timeout_s = float(ready_timeout_s)
        self.extra_env = dict(env or {})
        self.log_path = Path(log_path) if log_path else None
        self.name = name
        self.cwd = cwd
        self.env = dict(exports or {})  # variables the client side should export
        self.proc: subprocess.Popen | None = None
        self._log = None

    # -- start / ready / stop -------------------------------------------------------------------------
    def start(self) -> "ManagedService":
        if self.proc is not None:
            raise ServiceError(f"{self.name} already started (pid {self.proc.pid})")
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")
        try:
            self.proc = popen_group(
                self.command,
                cwd=self.cwd,
                env={**os.environ, **self.extra_env},
                stdout=self._log or subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            raise ServiceError(f"cannot start {self.name}: {shlex.join(self.command)}: {exc}") from exc
        _LIVE.add(self)
        return self

    def _log_tail(self, n: int = 30) -> str:
        if not self.log_path or not self.log_path.exists():
            return "(no log)"
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.ready_url, timeout=2.0) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self) -> "ManagedService":
        deadline = time.monotonic() + self.ready_timeout_s
        delay = 0.1
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise ServiceError(
                    f"{self.name} exited with status {code} before {self.ready_url} answered; "
                    f"command: {shlex.join(self.command)}\nlog tail:\n{self._log_tail()}"
                )
            if self.ready():
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(
                    f"{self.name} not ready at {self.ready_url} after {self.ready_timeout_s:.0f}s; "
                    f"command: {shlex.join(self.command)}\nlog tail:\n{self._log_tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def stop(self, grace_s: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_group(proc, grace_s=grace_s)  # children may outlive the leader: the group is always cleared
        if self._log is not None:
            self._log.close()
            self._log = None
        _LIVE.discard(self)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> "ManagedService":
        self.start()
        return self.wait_ready()

    def __exit__(self, *exc) -> None:
        self.stop()


def embedding_service(
    section: Mapping[str, Any], log_path: str | os.PathLike | None = None, port: int | None = None
) -> ManagedService:
    """A :class:`ManagedService` for the config's ``embedding`` section (not started yet).

    ``server_command`` is a template with ``{python}``, ``{host}``, ``{port}``, ``{model}`` (served name) and
    ``{model_path}`` (``server_model_path``); empty → the project's CPU server. The port is ``server_port``, or a
    free one when that is 0. ``service.endpoint`` is what points the reward at the server (backend, api_base,
    model: a training run records it in its settings.json, :mod:`codegrpo.runsettings`); ``service.env`` holds
    the same settings as ``CODEGRPO_EMBEDDING_*`` variables for a process outside a training run.
    """
    from codegrpo.rewards.embedding import MINILM_NAME, env_from_config, served_endpoint

    host = LOOPBACK
    port = int(port or section.get("server_port") or 0) or free_port(host)
    template = section.get("server_command") or DEFAULT_SERVER_COMMAND
    model = section.get("model") or MINILM_NAME
    fields = {
        "python": shlex.quote(sys.executable),
        "host": host,
        "port": port,
        "model": shlex.quote(model),
        "model_path": shlex.quote(str(section.get("server_model_path") or model)),
    }
    command = server_command(template, fields, "embedding.server_command")
    api_base = f"http://{host}:{port}/v1"
    endpoint = served_endpoint(section, api_base)
    exports = env_from_config({**section, **endpoint})
    env = {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    ready_s = section.get("server_ready_timeout_s")
    if ready_s is None:
        from codegrpo.runsettings import schema_defaults

        ready_s = schema_defaults("embedding")["server_ready_timeout_s"]
    svc = ManagedService(
        command,
        ready_url=f"{api_base}/models",
        ready_timeout_s=float(ready_s),
        env=env,
        log_path=log_path,
        name=f"embedding server ({command[0]})",
        exports=exports,
    )
    svc.endpoint = endpoint
    return svc


def server_command(template: str, fields: Mapping[str, Any], key: str) -> list[str]:
    """The argv of a server's command ``template`` (config key ``key``) with ``fields`` filled in; a template with
    an unknown placeholder or bad syntax is a :class:`ServiceError` naming the key and the placeholders."""
    try:
        return shlex.split(template.format(**fields))
    except (KeyError, IndexError, ValueError) as exc:
        raise ServiceError(f"{key} {template!r}: bad template ({exc}); placeholders: {sorted(fields)}") from exc


def reward_model_service(
    section: Mapping[str, Any], log_path: str | os.PathLike | None = None, port: int | None = None
) -> ManagedService:
    """A :class:`ManagedService` for a DHRCL run's ``reward_model`` settings (``dhrcl.reward_model``, resolved):
    the project's scoring server (:mod:`codegrpo.rm_server`) over ``model`` (hub id or folder) on ``device``.
    ``service.endpoint`` (api_base, model) is what the reward's client needs (recorded under
    ``served.reward_model`` in the run's settings.json)."""
    if not section.get("model"):
        raise ServiceError("dhrcl.reward_model.model is not set: a reward-model variant needs a checkpoint")
    host = LOOPBACK
    port = int(port or section.get("server_port") or 0) or free_port(host)
    template = section.get("server_command") or RM_SERVER_COMMAND
    name = str(section.get("served_name") or section["model"])
    fields = {
        "python": shlex.quote(sys.executable),
        "host": host,
        "port": port,
        "model": shlex.quote(name),
        "model_path": shlex.quote(str(section["model"])),
    }
    for key in ("value_head_prefix", "dtype", "device", "max_length", "batch_size"):
        fields[key] = shlex.quote(str(section[key]))
    command = server_command(template, fields, "dhrcl.reward_model.server_command")
    api_base = f"http://{host}:{port}/v1"
    env = {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    if section.get("cuda_visible_devices") is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(section["cuda_visible_devices"])
    svc = ManagedService(
        command,
        ready_url=f"{api_base}/models",
        ready_timeout_s=float(section.get("server_ready_timeout_s") or 600),
        env=env,
        log_path=log_path,
        name=f"reward-model server ({name})",
    )
    svc.endpoint = {"api_base": api_base, "model": name}
    return svc

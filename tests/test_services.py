"""Service launcher: start, wait until ready, stop the whole process group; failures are clear errors."""

from __future__ import annotations

import json
import shlex
import sys
import time
import urllib.request

import pytest

from codegrpo.services import DEFAULT_SERVER_COMMAND, ManagedService, ServiceError, embedding_service, free_port


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _service(tmp_path, cmd: list[str], name: str, ready_url: str | None = None, ready_timeout_s: float = 30):
    """A ManagedService logging to tmp_path/svc.log; by default ready at /health of a free port nobody serves."""
    url = ready_url or f"http://127.0.0.1:{free_port()}/health"
    return ManagedService(cmd, ready_url=url, ready_timeout_s=ready_timeout_s, log_path=tmp_path / "svc.log", name=name)


def test_process_group_is_stopped(tmp_path):
    port = free_port()
    pidfile = tmp_path / "child.pid"
    # the service forks a helper child, then execs an HTTP server: stopping must take both down
    cmd = [
        "sh",
        "-c",
        f"sleep 300 & echo $! > {shlex.quote(str(pidfile))}; "
        f"exec {shlex.quote(sys.executable)} -m http.server {port} --bind 127.0.0.1",
    ]
    svc = _service(tmp_path, cmd, "http.server", ready_url=f"http://127.0.0.1:{port}/")
    with svc:
        leader = svc.pid
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as r:
            assert r.status == 200
        child = int(pidfile.read_text())
        assert _alive(leader) and _alive(child)
    deadline = time.monotonic() + 5
    while (_alive(leader) or _alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(leader) and not _alive(child)
    assert svc.pid is None


def test_early_exit_reports_the_log(tmp_path):
    cmd = [sys.executable, "-c", "import sys; print('cannot load model XYZ', flush=True); sys.exit(3)"]
    svc = _service(tmp_path, cmd, "broken")
    t0 = time.monotonic()
    with pytest.raises(ServiceError, match=r"(?s)exited with status 3.*cannot load model XYZ"):
        with svc:
            pass
    assert time.monotonic() - t0 < 20


def test_not_ready_in_time_is_stopped(tmp_path):
    cmd = [sys.executable, "-c", "import time; time.sleep(120)"]
    svc = _service(tmp_path, cmd, "sleepy", ready_timeout_s=1.0)
    svc.start()
    pid = svc.pid
    with pytest.raises(ServiceError, match="not ready"):
        svc.wait_ready()
    time.sleep(0.2)
    assert not _alive(pid)


def test_missing_executable(tmp_path):
    with pytest.raises(ServiceError, match="cannot start"):
        ManagedService(["/nonexistent/vllm"], ready_url="http://127.0.0.1:1/").start()


def test_embedding_service_command_templates():
    svc = embedding_service({"backend": "local"}, port=12345)
    assert svc.command[:3] == [sys.executable, "-m", "codegrpo.embed_server"]
    assert "--port" in svc.command and "12345" in svc.command and "127.0.0.1" in svc.command
    assert svc.ready_url == "http://127.0.0.1:12345/v1/models"
    assert svc.env["CODEGRPO_EMBEDDING_API_BASE"] == "http://127.0.0.1:12345/v1"
    assert svc.env["CODEGRPO_EMBEDDING_BACKEND"] == "openai"  # the reward talks to the server
    gpu = embedding_service(
        {
            "backend": "openai",
            "model": "Qwen3-Embedding-0.6B",
            "server_model_path": "/models/Qwen3 Embedding",
            "server_command": "python -m vllm.entrypoints.openai.api_server --model {model_path} "
            "--served-model-name {model} --host {host} --port {port} --dtype float16",
            "chunk_size": 512,
        },
        port=8000,
    )
    assert gpu.command == [
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/Qwen3 Embedding",
        "--served-model-name",
        "Qwen3-Embedding-0.6B",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--dtype",
        "float16",
    ]
    assert gpu.env["CODEGRPO_EMBEDDING_MODEL"] == "Qwen3-Embedding-0.6B"
    assert gpu.env["CODEGRPO_EMBEDDING_CHUNK_SIZE"] == "512"
    with pytest.raises(ServiceError, match="placeholders"):
        embedding_service({"server_command": "serve --gpu {gpu}"}, port=1)
    assert "{port}" in DEFAULT_SERVER_COMMAND


@pytest.mark.slow
def test_embedding_server_lifecycle(tmp_path):
    svc = embedding_service({"backend": "local"}, log_path=tmp_path / "embed.log")
    with svc:
        pid = svc.pid
        base = svc.env["CODEGRPO_EMBEDDING_API_BASE"]
        req = urllib.request.Request(
            base + "/embeddings",
            data=json.dumps({"model": "all-MiniLM-L6-v2", "input": ["var: x"]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req) as r:
            assert len(json.load(r)["data"][0]["embedding"]) == 384
    time.sleep(0.2)
    assert not _alive(pid)
    assert "listening on http://127.0.0.1" in (tmp_path / "embed.log").read_text()

"""Embedding backends against the real loopback server over the packaged MiniLM: batching, cache, faults."""

from __future__ import annotations

import base64
import http.server
import json
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest

from codegrpo.rewards import compute_score_batch
from codegrpo.rewards import embedding as E
from codegrpo.rewards import sk2d
from codegrpo.services import embedding_service, free_port


# ---------------------------------------------------------------------------------------------- settings (no server)
def test_settings_reference_env_and_precedence(monkeypatch):
    s = E.settings_from_env(environ={})
    assert (s.backend, s.variant, s.model, s.api_base) == (
        "openai",
        "qwen3",
        "Qwen3-Embedding-0.6B",
        "http://127.0.0.1:8000/v1",
    )
    env = {
        "GTE_EMBEDDING_MODEL_PATH": "gte-x",
        "GTE_EMBEDDING_API_BASE": "http://127.0.0.1:9/v1",
        "QWEN3_EMBEDDING_MODEL_PATH": "q",
    }
    s = E.settings_from_env({"variant": "gte"}, environ=env)
    assert (s.model, s.api_base) == ("gte-x", "http://127.0.0.1:9/v1")
    env["CODEGRPO_EMBEDDING_MODEL"] = "override"
    env["CODEGRPO_EMBEDDING_CHUNK_SIZE"] = "7"
    s = E.settings_from_env({"variant": "gte", "timeout_s": 3}, environ=env)
    assert (s.model, s.chunk_size, s.timeout_s) == ("override", 7, 3.0)
    assert E.settings_from_env({"backend": "local"}, environ={}).model == E.MINILM_NAME
    # api key chain: named variable, then <PREFIX>_API_KEY, then OPENAI_API_KEY, then "none"
    for k in ("QWEN3_EMBEDDING_API_KEY", "OPENAI_API_KEY", "MY_KEY"):
        monkeypatch.delenv(k, raising=False)
    assert E.EmbeddingSettings().api_key() == "none"
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    assert E.EmbeddingSettings().api_key() == "o"
    monkeypatch.setenv("QWEN3_EMBEDDING_API_KEY", "q")
    assert E.EmbeddingSettings().api_key() == "q"
    monkeypatch.setenv("MY_KEY", "m")
    assert E.EmbeddingSettings(api_key_env="MY_KEY").api_key() == "m"
    with pytest.raises(E.EmbeddingError, match="variant"):
        E.settings_from_env({"variant": "bert"}, environ={})
    with pytest.raises(E.EmbeddingError, match="unknown embedding setting"):
        E.settings_from_env({"colour": "red"}, environ={})
    assert E.env_from_config({"backend": "local", "chunk_size": 64, "model": ""}) == {
        "CODEGRPO_EMBEDDING_BACKEND": "local",
        "CODEGRPO_EMBEDDING_CHUNK_SIZE": "64",
    }


def test_pinned_sha256_is_checked(tmp_path):
    weights = f"{E.packaged_minilm_path()}/model.safetensors"
    E.verify_sha256(weights, E.MINILM_SHA256)
    with pytest.raises(E.EmbeddingError, match="does not match"):
        E.verify_sha256(weights, "0" * 64)
    (tmp_path / "model.safetensors").write_bytes(b"not the model")
    with pytest.raises(E.EmbeddingError, match="does not match the pinned"):
        E.load_local_model(str(tmp_path), sha256=E.MINILM_SHA256)
    # the packaged model is always checked against the pin (a copy with other weights would be refused)
    assert E.EmbeddingSettings().local_sha256 == ""


def test_unreachable_service_fails_fast_naming_url_and_model():
    port = free_port()
    s = E.EmbeddingSettings(api_base=f"http://127.0.0.1:{port}/v1", model="m-x", health_timeout_s=1.0, backoff_s=0.1)
    t0 = time.monotonic()
    with pytest.raises(E.EmbeddingServiceError) as ei:
        E.make_embedder(s)
    assert time.monotonic() - t0 < 10
    assert f"127.0.0.1:{port}" in str(ei.value) and "m-x" in str(ei.value)


# ---------------------------------------------------------------------------------------------- with the server
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("embed") / "server.log"
    with embedding_service({"backend": "local"}, log_path=log) as svc:
        yield svc


def _settings(server, **kw):
    return E.EmbeddingSettings(
        api_base=server.env["CODEGRPO_EMBEDDING_API_BASE"], model=E.MINILM_NAME, backoff_s=0.05, **kw
    )


@pytest.mark.slow
def test_server_endpoints(server):
    base = server.env["CODEGRPO_EMBEDDING_API_BASE"]
    root = base[: -len("/v1")]
    with urllib.request.urlopen(root + "/health") as r:
        assert json.load(r)["status"] == "ok"
    with urllib.request.urlopen(base + "/models") as r:
        assert [m["id"] for m in json.load(r)["data"]] == [E.MINILM_NAME]

    def post(body):
        req = urllib.request.Request(
            base + "/embeddings", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    code, f = post({"model": E.MINILM_NAME, "input": ["int count", "char *buf"]})
    assert code == 200 and len(f["data"]) == 2 and len(f["data"][0]["embedding"]) == 384
    code, b = post({"model": E.MINILM_NAME, "input": "int count", "encoding_format": "base64"})
    vec = struct.unpack("<384f", base64.b64decode(b["data"][0]["embedding"]))
    assert vec == pytest.approx(f["data"][0]["embedding"], abs=1e-6)
    assert post({"model": "other", "input": "x"})[0] == 404
    assert post({"model": E.MINILM_NAME, "input": [1, 2]})[0] == 400
    assert post({"model": E.MINILM_NAME, "input": []})[0] == 400


@pytest.mark.slow
def test_openai_backend_batches_dedupes_and_caches(server):
    emb = E.make_embedder(_settings(server, chunk_size=3))
    texts = [f"var: v{i} count" for i in range(7)]
    vecs = emb.embed(texts + texts[:3])
    assert emb.requests == 3  # 7 distinct texts, 3 per request
    assert len(vecs) == 10 and vecs[7] == vecs[0]
    emb.embed(texts[:5])
    assert emb.requests == 3 and emb.cache_hits == 5
    # same vectors as the in-process model
    local = E.LocalBackend(E.EmbeddingSettings(backend="local"))
    assert (f"{E.packaged_minilm_path()}/model.safetensors", E.MINILM_SHA256) in E._VERIFIED
    for a, b in zip(local.embed(texts[:2]), vecs[:2]):
        assert list(a) == pytest.approx(list(b), abs=1e-5)


@pytest.mark.slow
def test_wrong_model_is_a_clear_error(server):
    s = E.EmbeddingSettings(api_base=server.env["CODEGRPO_EMBEDDING_API_BASE"], model="Qwen3-Embedding-0.6B")
    with pytest.raises(E.EmbeddingServiceError, match="does not serve the model.*all-MiniLM-L6-v2"):
        E.make_embedder(s)
    # without the health check, the request is rejected (404: not transient, no retries)
    emb = E.make_embedder(s, check=False)
    with pytest.raises(E.EmbeddingServiceError, match="rejected the request"):
        emb.embed(["var: x"])
    assert emb.requests == 1


class _FlakyProxy:
    """A loopback HTTP proxy in front of the real server that answers 503 to the first ``fail`` POSTs."""

    def __init__(self, target: str, fail: int):
        self.target, self.fail, self.posts = target, fail, 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _forward(self, data=None):
                req = urllib.request.Request(
                    proxy.target + self.path, data=data, headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(req) as r:
                    body = r.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._forward()

            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                proxy.posts += 1
                if proxy.posts <= proxy.fail:
                    body = b'{"error": {"message": "overloaded"}}'
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self._forward(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.slow
def test_transient_errors_are_retried_then_a_clear_error(server):
    root = server.env["CODEGRPO_EMBEDDING_API_BASE"][: -len("/v1")]
    proxy = _FlakyProxy(root, fail=2)
    try:
        emb = E.make_embedder(
            E.EmbeddingSettings(api_base=proxy.url + "/v1", model=E.MINILM_NAME, backoff_s=0.05, max_retries=3)
        )
        assert len(emb.embed(["var: a", "var: b"])) == 2
        assert proxy.posts == 3 and emb.requests == 3
        proxy.posts, proxy.fail = 0, 10**6  # now it stays down
        with pytest.raises(E.EmbeddingServiceError) as ei:
            emb.embed(["var: c"])
        assert proxy.posts == 4  # 1 + max_retries
        assert proxy.url in str(ei.value) and E.MINILM_NAME in str(ei.value) and "4 times" in str(ei.value)
    finally:
        proxy.close()


@pytest.mark.slow
def test_identifier_reward_through_the_registry(server, monkeypatch, data_dir):
    for k, v in server.env.items():
        monkeypatch.setenv(k, v)
    E.reset_embedders()
    try:
        rows = [json.loads(x) for x in open(data_dir / "sk2decompile" / "sk2decompile-rl-examples.jsonl")][:4]
        gts = [r["reward_model"]["ground_truth"] for r in rows]
        sols = [gts[0], gts[1], "", gts[0]]
        out = compute_score_batch(["sk2decompile_identifier"] * 4, sols, gts, [None] * 4)
        assert out[0]["score"] == pytest.approx(1.0, abs=1e-6) and out[1]["score"] == pytest.approx(1.0, abs=1e-6)
        assert out[2] == {"score": 0.0, "cosine": 0.0, "embedded": 0.0}
        assert 0.0 < out[3]["score"] < 1.0
        emb = E.get_embedder()
        assert emb.requests == 1 and emb.settings.backend == "openai"
        # the same pair scored the reference way (its own 2-text request) agrees
        a, b = sk2d.identifier_summary(gts[0]), sk2d.identifier_summary(gts[3])
        fresh = E.make_embedder(emb.settings)
        va, vb = fresh.backend.embed([a, b])
        assert out[3]["score"] == pytest.approx(sk2d.cosine(va, vb) ** 2, abs=1e-5)
        # a batch from a reward_kwargs override picks another embedder (local backend)
        out2 = compute_score_batch(
            ["sk2decompile_identifier"], [gts[3]], [gts[0]], [None], embedding={"backend": "local"}
        )
        assert out2[0]["score"] == pytest.approx(out[3]["score"], abs=1e-5)
    finally:
        E.reset_embedders()


def test_embedding_config_merges_stage_overrides(repo_root):
    from codegrpo.config import load_config

    cfg = load_config(repo_root / "config.yaml")
    merged = E.embedding_config(cfg, "skin_rl")
    assert merged["backend"] == "local" and merged["serve"] is False
    paper = E.embedding_config(load_config(repo_root / "config" / "paper.yaml"), "skin_rl")
    assert paper["backend"] == "openai" and paper["serve"] is True and "{port}" in paper["server_command"]
    env = E.env_from_config(paper)
    assert env["CODEGRPO_EMBEDDING_MODEL"] == "Qwen3-Embedding-0.6B" and "CODEGRPO_EMBEDDING_SERVE" not in env
    s = E.settings_from_env(environ=env)
    assert (s.backend, s.chunk_size, s.max_retries) == ("openai", 512, 6)
    bad = {"embedding": {}, "skin_rl": {"embedding": {"colour": 1}}}
    with pytest.raises(E.EmbeddingError, match="skin_rl.embedding.*colour"):
        E.embedding_config(bad, "skin_rl")
    assert E.embedding_config({"embedding": {"backend": "local"}, "s": {"embedding_server": True}}, "s")["serve"]


# ---------------------------------------------------------------------------------------------- identifier metric
BRINGUP = "data/sk2decompile/bringupbench-merged.O0.func_map.infer.jsonl"


class _RecordingEmbeddings(http.server.BaseHTTPRequestHandler):
    """A loopback stand-in for vLLM's OpenAI server: serves one model name, records the model of each request."""

    served = "Qwen3-Embedding-0.6B"
    seen: list = []

    def log_message(self, *a):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, {"object": "list", "data": [{"id": self.served, "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body["model"])
        if body["model"] != self.served:
            return self._send(404, {"error": {"message": f"model {body['model']} not served"}})
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        # a deterministic vector per text (bytes of its sha256, shifted off zero)
        import hashlib

        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": [b / 255.0 + 0.01 for b in hashlib.sha256(t.encode()).digest()[:16]],
            }
            for i, t in enumerate(texts)
        ]
        self._send(
            200,
            {"object": "list", "data": data, "model": self.served, "usage": {"prompt_tokens": 0, "total_tokens": 0}},
        )


def test_identifier_metric_uses_the_configured_model(repo_root, tmp_path, monkeypatch):
    from codegrpo import tables
    from codegrpo.config import load_config
    from codegrpo.eval import decompile as d

    for k in [k for k in __import__("os").environ if k.startswith("CODEGRPO_EMBEDDING_")]:
        monkeypatch.delenv(k)
    paper = d.metric_embedding_config(load_config(repo_root / "config" / "paper.yaml"))
    assert (paper["backend"], paper["model"], paper["serve"]) == ("openai", "Qwen3-Embedding-0.6B", True)
    local = d.metric_embedding_config(load_config(repo_root / "config.yaml"))
    assert local["backend"] == "local"  # the CPU default: the packaged MiniLM in process
    # evaluate.decompile.embedding overrides key by key; unknown keys are named
    cfg = {"embedding": {"backend": "openai", "model": "m"}, "evaluate": {"decompile": {"embedding": {"model": "n"}}}}
    assert d.metric_embedding_config(cfg) == {"backend": "openai", "model": "n"}
    cfg["evaluate"]["decompile"]["embedding"] = {"modle": "n"}
    with pytest.raises(ValueError, match=r"evaluate.decompile.embedding: unknown key\(s\) \['modle'\]"):
        d.metric_embedding_config(cfg)

    # the paper's section, with a loopback server standing in for the vLLM server the job would start
    _RecordingEmbeddings.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RecordingEmbeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    E.reset_embedders()
    try:
        section = {**paper, "serve": False, "api_base": f"http://127.0.0.1:{server.server_port}/v1", "backoff_s": 0.05}
        out = tmp_path / "eval" / "bringupbench" / "identifier.json"
        res = d.run_bringupbench_identifier(repo_root / BRINGUP, out, limit=3, embedding=section)
        assert _RecordingEmbeddings.seen and set(_RecordingEmbeddings.seen) == {"Qwen3-Embedding-0.6B"}
        assert res["embedding"]["model"] == "Qwen3-Embedding-0.6B" and res["embedding"]["backend"] == "openai"
        assert all(0.0 <= v["mean"] <= 1.0 and v["n"] == 3 for v in res["scores"].values())
        t = tables.table_identifier(tables.load_results([out]))
        assert {r["embedding model"] for r in t.rows} == {"Qwen3-Embedding-0.6B (openai)"}
        # a model the endpoint does not serve is refused, never scored
        E.reset_embedders()
        with pytest.raises(E.EmbeddingServiceError, match="does not serve the model"):
            d.run_bringupbench_identifier(
                repo_root / BRINGUP, tmp_path / "x.json", limit=1, embedding={**section, "model": "all-MiniLM-L6-v2"}
            )
        assert not (tmp_path / "x.json").exists()
    finally:
        E.reset_embedders()
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_identifier_metric_serves_the_configured_model(repo_root, tmp_path, monkeypatch):
    """serve: true starts the section's server for the scoring (here the project's CPU server, under the
    paper's model name) and points the metric at it."""
    from codegrpo.config import load_config
    from codegrpo.eval import decompile as d

    for k in [k for k in __import__("os").environ if k.startswith("CODEGRPO_EMBEDDING_")]:
        monkeypatch.delenv(k)
    paper = d.metric_embedding_config(load_config(repo_root / "config" / "paper.yaml"))
    section = {**paper, "server_command": "", "server_port": 0, "server_ready_timeout_s": 300}
    E.reset_embedders()
    try:
        res = d.run_bringupbench_identifier(
            repo_root / BRINGUP, tmp_path / "id.json", limit=2, embedding=section, embedding_log=tmp_path / "server.log"
        )
    finally:
        E.reset_embedders()
    assert res["embedding"]["served"] and res["embedding"]["model"] == "Qwen3-Embedding-0.6B"
    assert res["embedding"]["api_base"].startswith("http://127.0.0.1:")
    assert "as 'Qwen3-Embedding-0.6B'" in (tmp_path / "server.log").read_text()


def test_identifier_reward_reads_the_run_settings(data_dir, tmp_path, monkeypatch):
    """Inside a training run the identifier reward embeds with the run's settings.json: its embedding section
    with the served endpoint laid over it beats CODEGRPO_EMBEDDING_*; an explicit reward kwarg beats both."""
    from codegrpo import runsettings

    _RecordingEmbeddings.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RecordingEmbeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for k in [k for k in __import__("os").environ if k.startswith("CODEGRPO_EMBEDDING_")]:
        monkeypatch.delenv(k)
    # a stale override pointing elsewhere: inside the run it must not be used
    monkeypatch.setenv("CODEGRPO_EMBEDDING_API_BASE", f"http://127.0.0.1:{free_port()}/v1")
    monkeypatch.setenv("CODEGRPO_EMBEDDING_MODEL", "not-this-one")
    path = tmp_path / "settings.json"
    api_base = f"http://127.0.0.1:{server.server_port}/v1"
    path.write_text(
        json.dumps(
            {
                "fingerprint": "x",
                "settings": {
                    "embedding": {"backend": "local", "model": "", "api_base": "", "chunk_size": 2, "backoff_s": 0.05}
                },
                "served": {
                    "embedding": {"backend": "openai", "api_base": api_base, "model": _RecordingEmbeddings.served}
                },
            }
        )
    )
    monkeypatch.setenv(runsettings.SETTINGS_ENV, str(path))
    E.reset_embedders()
    try:
        rows = [json.loads(x) for x in open(data_dir / "sk2decompile" / "sk2decompile-rl-examples.jsonl")][:3]
        gts = [r["reward_model"]["ground_truth"] for r in rows]
        out = compute_score_batch(["sk2decompile_identifier"] * 3, gts, gts, [None] * 3)
        assert all(r["score"] == pytest.approx(1.0, abs=1e-6) for r in out)
        emb = E.get_embedder()
        assert (emb.settings.api_base, emb.settings.model, emb.settings.chunk_size) == (
            api_base,
            _RecordingEmbeddings.served,
            2,
        )
        assert _RecordingEmbeddings.seen and set(_RecordingEmbeddings.seen) == {_RecordingEmbeddings.served}
        # explicit argument > run settings
        assert E.settings_from_env({"chunk_size": 5}).chunk_size == 5
        # outside a training run the documented override applies again
        monkeypatch.delenv(runsettings.SETTINGS_ENV)
        assert E.settings_from_env().model == "not-this-one"
    finally:
        E.reset_embedders()
        server.shutdown()
        server.server_close()

"""Faults a long RL run meets: the embedding service down (at start, mid-run), slow or returning garbage; gcc
missing; the disk filling up or the job being killed while a data stage writes its JSONL / Parquet outputs.

The embedding faults use the real loopback server (:mod:`codegrpo.embed_server`, started by
:mod:`codegrpo.services`) or a small real HTTP server defined here that speaks the OpenAI embeddings protocol
and misbehaves on purpose. A service fault must surface as :class:`EmbeddingServiceError` naming the URL and the
model — never as a score of 0 that would silently become a training signal.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from codegrpo.rewards import compute_score_batch
from codegrpo.rewards import embedding as E

pytestmark = [pytest.mark.hostile, pytest.mark.timeout(300)]

IDENTIFIER = "sk2decompile_identifier"
MODEL = "fake-embedder"
CODE_A = "int func1(int var1) { return var1 + 1; }"
CODE_B = "struct type1 { int field1; }; int func2(struct type1 *var2) { return var2->field1; }"


# ---------------------------------------------------------------------------------------- misbehaving server
class FakeEmbeddingServer:
    """A loopback OpenAI-compatible embeddings server. ``mode`` selects the answer to POST /v1/embeddings:

    ok (deterministic unit vectors of ``dim``), slow (sleeps ``delay`` s first), status (HTTP ``status``),
    wrong_dim (the second input gets a vector of another length), nan, inf, empty (zero-length vectors),
    zero (all-zero vectors), short (one embedding fewer than inputs), html (200 with a non-JSON body),
    drop (closes the connection without answering), no_data (JSON without ``data``).
    """

    def __init__(self, mode: str = "ok", dim: int = 8, delay: float = 0.0, status: int = 503):
        self.mode, self.dim, self.delay, self.status = mode, dim, delay, status
        self.posts = 0
        srv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    body = {
                        "object": "list",
                        "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "test"}],
                    }
                    return self._send(200, json.dumps(body).encode())
                self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
                srv.posts += 1
                texts = req.get("input") or []
                texts = [texts] if isinstance(texts, str) else texts
                m = srv.mode
                if m == "slow":
                    time.sleep(srv.delay)
                if m == "status":
                    return self._send(srv.status, b'{"error": {"message": "injected failure"}}')
                if m == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if m == "html":
                    return self._send(200, b"<html>502 Bad Gateway</html>", "text/html")
                if m == "no_data":
                    return self._send(200, b'{"object": "list", "model": "x"}')
                vecs = [srv.vector(t) for t in texts]
                if m == "wrong_dim" and len(vecs) > 1:
                    vecs[1] = vecs[1] + [0.5] * 3
                elif m == "nan":
                    vecs = [[float("nan")] * srv.dim for _ in vecs]
                elif m == "inf":
                    vecs = [[float("inf")] + v[1:] for v in vecs]
                elif m == "empty":
                    vecs = [[] for _ in vecs]
                elif m == "zero":
                    vecs = [[0.0] * srv.dim for _ in vecs]
                elif m == "short":
                    vecs = vecs[:-1]
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)]
                body = {
                    "object": "list",
                    "data": data,
                    "model": MODEL,
                    "usage": {"prompt_tokens": 0, "total_tokens": 0},
                }
                self._send(200, json.dumps(body).encode())  # json.dumps writes NaN/Infinity literally

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def vector(self, text: str) -> list[float]:
        h = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        v = [b - 127.5 for b in h[: self.dim]]
        n = math.sqrt(sum(x * x for x in v))
        return [x / n for x in v]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def fake_server(**kw):
    srv = FakeEmbeddingServer(**kw)
    try:
        yield srv
    finally:
        srv.close()


def _embedding(url: str, **kw) -> dict:
    """Overrides as the training stage passes them (verl reward_kwargs ``embedding``)."""
    base = {
        "backend": "openai",
        "api_base": url,
        "model": MODEL,
        "backoff_s": 0.05,
        "max_retries": 2,
        "timeout_s": 5.0,
        "health_timeout_s": 2.0,
        "cache_size": 0,
    }
    base.update(kw)
    return base


@pytest.fixture(autouse=True)
def _fresh_embedders():
    E.reset_embedders()  # the per-process embedders are cached by settings; each test starts clean
    yield
    E.reset_embedders()


def _score(emb: dict, sols=(CODE_A, CODE_B), gts=(CODE_B, CODE_A)):
    return compute_score_batch([IDENTIFIER] * len(sols), list(sols), list(gts), None, embedding=emb)


def _assert_names_service(exc: BaseException, url: str):
    msg = str(exc)
    assert url.rstrip("/") in msg and MODEL in msg, msg


def test_fake_server_healthy_baseline():
    """The double answers like a real service when told to: finite scores in [0, 1], one request per batch."""
    with fake_server() as srv:
        out = _score(_embedding(srv.url))
        assert [r["embedded"] for r in out] == [1.0, 1.0]
        assert all(0.0 <= r["score"] <= 1.0 for r in out)
        assert srv.posts == 1


# ---------------------------------------------------------------------------------------- down at start / mid-run
def test_service_down_at_start_fails_fast_naming_url_and_model():
    with fake_server() as srv:
        url = srv.url
    # the port is closed now: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(E.EmbeddingServiceError) as ei:
        _score(_embedding(url))
    _assert_names_service(ei.value, url)
    assert "not reachable" in str(ei.value)
    assert time.monotonic() - t0 < 60  # bounded by health_timeout_s, not by the run


def test_service_that_serves_another_model_fails_at_start():
    with fake_server() as srv:
        with pytest.raises(E.EmbeddingServiceError, match="does not serve the model"):
            _score(_embedding(srv.url, model="some-other-model"))
        assert srv.posts == 0  # nothing was scored against the wrong model


def test_service_down_mid_run_retries_then_raises():
    with fake_server() as srv:
        emb = _embedding(srv.url, max_retries=3)
        first = _score(emb)
        assert all(r["embedded"] == 1.0 for r in first)
        srv.mode, srv.status, srv.posts = "status", 503, 0
        with pytest.raises(E.EmbeddingServiceError) as ei:
            _score(emb, sols=(CODE_A + " ",), gts=("int func9(void) { return 0; }",))
        assert srv.posts == 4  # the first try and 3 retries
        _assert_names_service(ei.value, srv.url)
        assert "4 times" in str(ei.value)
        # it comes back: the next batch scores again (no sticky failure state)
        srv.mode = "ok"
        assert all(r["embedded"] == 1.0 for r in _score(emb, sols=("int func3(void) { return 1; }",), gts=(CODE_A,)))


def test_connection_dropped_is_retried_then_raises():
    with fake_server() as srv:
        emb = _embedding(srv.url, max_retries=2)
        _score(emb)
        srv.mode, srv.posts = "drop", 0
        with pytest.raises(E.EmbeddingServiceError) as ei:
            _score(emb, sols=("int func5(void) { return 5; }",), gts=(CODE_B,))
        assert srv.posts == 3
        _assert_names_service(ei.value, srv.url)


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_are_not_retried_and_raise(status):
    with fake_server() as srv:
        emb = _embedding(srv.url, max_retries=3)
        _score(emb)
        srv.mode, srv.status, srv.posts = "status", status, 0
        with pytest.raises(E.EmbeddingServiceError) as ei:
            _score(emb, sols=("int func6(void) { return 6; }",), gts=(CODE_B,))
        assert srv.posts == 1
        _assert_names_service(ei.value, srv.url)


def test_slow_service_times_out_and_raises():
    with fake_server() as srv:
        emb = _embedding(srv.url, timeout_s=0.5, max_retries=1)
        _score(emb)
        srv.mode, srv.delay, srv.posts = "slow", 3.0, 0
        with pytest.raises(E.EmbeddingServiceError) as ei:
            _score(emb, sols=("int func7(void) { return 7; }",), gts=(CODE_B,))
        assert srv.posts == 2
        assert "Timeout" in str(ei.value), str(ei.value)
        _assert_names_service(ei.value, srv.url)


@pytest.mark.slow
def test_real_server_killed_mid_run(tmp_path):
    """The project's own server (MiniLM) answers a batch, is killed, and the next batch raises after retries."""
    from codegrpo.services import embedding_service

    svc = embedding_service({"backend": "local"}, log_path=tmp_path / "embed.log")
    with svc:
        url = svc.env["CODEGRPO_EMBEDDING_API_BASE"]
        emb = {
            "backend": "openai",
            "api_base": url,
            "model": E.MINILM_NAME,
            "backoff_s": 0.05,
            "max_retries": 2,
            "cache_size": 0,
        }
        out = compute_score_batch([IDENTIFIER] * 2, [CODE_A, CODE_B], [CODE_A, CODE_A], None, embedding=emb)
        assert out[0]["score"] == pytest.approx(1.0) and 0.0 <= out[1]["score"] < 1.0
        os.killpg(svc.pid, signal.SIGKILL)  # the server dies (OOM killer, node failure...)
        time.sleep(0.5)
        with pytest.raises(E.EmbeddingServiceError) as ei:
            compute_score_batch([IDENTIFIER], [CODE_B], [CODE_B + " "], None, embedding=emb)
    msg = str(ei.value)
    assert url in msg and E.MINILM_NAME in msg and "3 times" in msg, msg


# ---------------------------------------------------------------------------------------- garbage answers
def test_wrong_count_raises():
    with fake_server(mode="short") as srv:
        with pytest.raises(E.EmbeddingServiceError, match=r"returned 1 embeddings for 2 inputs") as ei:
            _score(_embedding(srv.url))
        _assert_names_service(ei.value, srv.url)


@pytest.mark.parametrize("mode", ["html", "no_data"])
def test_non_embedding_answer_raises(mode):
    with fake_server(mode=mode) as srv:
        with pytest.raises(E.EmbeddingServiceError) as ei:
            _score(_embedding(srv.url))
        _assert_names_service(ei.value, srv.url)


@pytest.mark.parametrize("mode", ["wrong_dim", "nan", "inf", "empty", "zero"])
def test_garbage_vectors_raise(mode):
    """Vectors of different lengths would be truncated by the cosine, NaN/inf would give NaN scores, empty or
    all-zero vectors a silent 0: each is a service error instead."""
    with fake_server(mode=mode) as srv:
        with pytest.raises(E.EmbeddingServiceError) as ei:
            out = _score(_embedding(srv.url))
            print("scores from garbage vectors:", out)
        _assert_names_service(ei.value, srv.url)


# ---------------------------------------------------------------------------------------- gcc missing
_NO_GCC_SCRIPT = textwrap.dedent("""
    import json, sys
    from codegrpo.rewards import compute_score_batch
    try:
        out = compute_score_batch(["sk2decompile_structure"] * 2, ["int func1(void) { return 0; }"] * 2,
                                  ["int func1(void) { return 0; }"] * 2, [{"header": ""}] * 2)
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(3)
    print(json.dumps(out))
""")


def test_gcc_missing_fails_fast_instead_of_scoring_zero(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEGRPO_")}
    env["PATH"] = str(tmp_path)  # no gcc (nor anything else) on PATH; python is called by its full path
    proc = subprocess.run(
        [sys.executable, "-c", _NO_GCC_SCRIPT], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 3, f"scored without gcc: {proc.stdout.strip()}"
    print(proc.stderr.splitlines()[-1])
    assert "gcc" in proc.stderr.splitlines()[-1], proc.stderr[-2000:]


# ---------------------------------------------------------------------------------------- disk full / killed writes
WRITER = Path(__file__).parent / "fixtures" / "write_outputs.py"
sys.path.insert(0, str(WRITER.parent))
from write_outputs import OUTPUTS  # noqa: E402


def _run_writer(op, out, n, *extra, timeout=240):
    return subprocess.run(
        [sys.executable, str(WRITER), op, str(out), str(n), *extra], capture_output=True, text=True, timeout=timeout
    )


def _outputs(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.is_file())


def _assert_nothing_complete(out: Path, op: str, temps_allowed: bool):
    names = _outputs(out)
    present = [n for n in OUTPUTS[op] if n in names]
    assert present == [], f"{op}: outputs that look complete after a failed write: {present}"
    leftovers = [n for n in names if n not in OUTPUTS[op]]
    if temps_allowed:  # a killed process cannot clean up: only hidden *.tmp temporaries may remain
        assert all(n.startswith(".") and n.endswith(".tmp") for n in leftovers), leftovers
    else:
        assert leftovers == [], leftovers


@pytest.fixture(scope="module")
def output_sizes(tmp_path_factory):
    """Sizes of every op's outputs when the disk has room (the baseline the limits below are cut from)."""
    sizes = {}
    for op in OUTPUTS:
        out = tmp_path_factory.mktemp(f"ok_{op}")
        proc = _run_writer(op, out, 300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert _outputs(out) == sorted(OUTPUTS[op])
        sizes[op] = {n: (out / n).stat().st_size for n in OUTPUTS[op]}
    return sizes


def test_writers_complete_and_readable_with_room(output_sizes, tmp_path):
    assert all(s > 0 for op in output_sizes for s in output_sizes[op].values()), output_sizes
    import pyarrow.parquet as pq

    proc = _run_writer("stage_parquets", tmp_path, 300)
    assert proc.returncode == 0
    n = pq.read_table(tmp_path / "train.parquet").num_rows + pq.read_table(tmp_path / "val.parquet").num_rows
    assert n == 300


@pytest.mark.parametrize("op", sorted(OUTPUTS))
def test_disk_full_error_leaves_no_complete_looking_output(op, output_sizes, tmp_path):
    """A write that fails with EFBIG (as with ENOSPC) raises, and leaves neither output nor temporary."""
    limit = max(4096, max(output_sizes[op].values()) // 2)
    proc = _run_writer(op, tmp_path, 300, "--fsize", str(limit))
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "File too large" in proc.stderr, proc.stderr[-2000:]
    _assert_nothing_complete(tmp_path, op, temps_allowed=False)


@pytest.mark.parametrize("op", sorted(OUTPUTS))
def test_disk_full_kill_leaves_no_complete_looking_output(op, output_sizes, tmp_path):
    """Default SIGXFSZ: the kernel kills the writer mid-file; what remains is only a hidden temporary."""
    limit = max(4096, max(output_sizes[op].values()) // 2)
    proc = _run_writer(op, tmp_path, 300, "--fsize", str(limit), "--xfsz-kills")
    assert proc.returncode == -signal.SIGXFSZ, (proc.returncode, proc.stderr[-2000:])
    _assert_nothing_complete(tmp_path, op, temps_allowed=True)


def test_second_output_failing_takes_the_first_with_it(output_sizes, tmp_path):
    """train.parquet fits under the limit, val.parquet (written second) does not: neither appears."""
    s = output_sizes["stage_parquets"]
    assert s["val.parquet"] > s["train.parquet"] * 1.5, s
    limit = (s["train.parquet"] + s["val.parquet"]) // 2
    proc = _run_writer("stage_parquets", tmp_path, 300, "--fsize", str(limit))
    assert proc.returncode == 1 and "File too large" in proc.stderr, proc.stderr[-2000:]
    _assert_nothing_complete(tmp_path, "stage_parquets", temps_allowed=False)


def _kill_when(out: Path, op: str, n: int, pattern, min_bytes: int = 1) -> tuple[bool, list[str]]:
    """Start the writer, SIGKILL it as soon as a file matching ``pattern`` with at least ``min_bytes`` appears
    in ``out``; return (killed while writing, files present after the kill)."""
    ready = out / "input" / "ready"
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), op, str(out), str(n), "--ready", str(ready)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    killed = False
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if ready.exists():
                hits = []
                for p in out.iterdir():
                    if pattern(p.name):
                        with contextlib.suppress(FileNotFoundError):  # renamed meanwhile
                            if p.stat().st_size >= min_bytes:
                                hits.append(p)
                if hits:
                    proc.kill()
                    killed = True
                    break
            time.sleep(0.002)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return killed and proc.returncode == -signal.SIGKILL, _outputs(out)


@pytest.mark.slow
@pytest.mark.parametrize(
    "op, n, target, min_bytes",
    [
        ("parquet", 20000, "train.parquet", 1),  # killed while the file has some bytes
        ("jsonl", 20000, "records.jsonl", 1),
        ("stage_parquets", 8000, "val.parquet", 1),  # killed while the second file is written
        ("ingest", 4000, "rejects.jsonl", 0),  # killed once ingested.jsonl is complete, while rejects is written
    ],
    ids=["parquet", "jsonl", "stage_parquets", "ingest"],
)
def test_killed_mid_write_leaves_no_complete_looking_output(op, n, target, min_bytes, tmp_path):
    # the writer is killed once the target output (its temporary, or itself if written in place) shows up
    def pattern(name):  # its temporary; or the file itself once it has bytes (what an in-place writer shows)
        return (name == target and min_bytes > 0) or (name.startswith(f".{target}.") and name.endswith(".tmp"))

    for attempt in range(3):
        out = tmp_path / f"try{attempt}"
        out.mkdir()
        killed, names = _kill_when(out, op, n, pattern, min_bytes)
        if killed:
            break
        n *= 2  # the write finished before the killer saw it: a bigger input
    else:
        pytest.fail(f"{op}: the writer finished before it could be killed, even with {n} records")
    present = [x for x in OUTPUTS[op] if x in names]
    assert present == [], f"{op}: complete-looking outputs after SIGKILL: {present} (all files: {names})"
    assert all(x.startswith(".") and x.endswith(".tmp") for x in names if x not in OUTPUTS[op]), names


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 256 KiB tmpfs (a really full disk: ENOSPC); skipped where mounting is not allowed (not root)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True, capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def test_enospc_on_a_full_tmpfs(tiny_tmpfs):
    """Real ENOSPC: the records fit, the second output of the group does not; nothing is left behind."""
    from codegrpo.data.headers import write_dataset_outputs
    from write_outputs import records

    recs = records(60)  # ~150 kB of records.jsonl; headers.tsv then carries 60 kB reasons that do not fit
    for r in recs:
        r["header_reason"] = "x" * 2000
    with pytest.raises(OSError) as ei:
        write_dataset_outputs(
            recs,
            {"status_counts": {}},
            ingest_summary={"dataset": "big"},
            normalize_summary={},
            records_path=tiny_tmpfs / "records.jsonl",
            tsv_path=tiny_tmpfs / "headers.tsv",
            summary_path=tiny_tmpfs / "summary.json",
        )
    assert ei.value.errno == 28  # ENOSPC
    assert sorted(os.listdir(tiny_tmpfs)) == []

"""A loopback stand-in of the Hugging Face Hub for offline tests (``HF_ENDPOINT=http://127.0.0.1:<port>``).

It serves local folders as hub repositories through the routes huggingface_hub 0.3x calls (read in its
source: ``hf_api.py`` ``model_info`` / ``dataset_info`` / ``list_repo_tree`` / ``get_paths_info``,
``file_download.py`` ``get_hf_file_metadata`` / ``http_get``):

* ``GET /api/{models|datasets}/<id>[/revision/<rev>]``: repo info (``sha``, ``siblings``);
* ``GET /api/{models|datasets}/<id>/tree/<rev>[/<path>]`` (``recursive``): the file list;
* ``POST /api/{models|datasets}/<id>/paths-info/<rev>``: entries of the posted ``paths``;
* ``HEAD`` / ``GET /[datasets/]<id>/resolve/<rev>/<path>``: file metadata (``X-Repo-Commit``, ``ETag``,
  ``Content-Length``) and content (``Range`` honoured).

Every request is recorded in ``server.requests`` as (method, path).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubStandIn:
    def __init__(self, models: dict[str, Path] | None = None, datasets: dict[str, Path] | None = None):
        self.repos = {("models", k): Path(v) for k, v in (models or {}).items()}
        self.repos.update({("datasets", k): Path(v) for k, v in (datasets or {}).items()})
        self.requests: list[tuple[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "HubStandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- repository contents ----------------------------------------------------------------------------
    def files(self, kind: str, repo: str) -> list[str]:
        root = self.repos[(kind, repo)]
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    def entry(self, kind: str, repo: str, path: str) -> dict:
        full = self.repos[(kind, repo)] / path
        if full.is_dir():
            return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "path": path}
        data = full.read_bytes()
        return {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": path}

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _json(self, obj, status=200):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _missing(self, what):
                self.send_response(404)
                self.send_header("X-Error-Code", "RepoNotFound" if "repo" in what else "EntryNotFound")
                self.send_header("X-Error-Message", what)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _route(self):
                url = urllib.parse.urlsplit(self.path)
                path = urllib.parse.unquote(url.path)
                query = urllib.parse.parse_qs(url.query)
                hub.requests.append((self.command, path))
                m = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
                if m:
                    kind, repo = m.group(1), m.group(2)
                    if (kind, repo) not in hub.repos:
                        return self._missing(f"repo {repo} not found")
                    return self._json(
                        {
                            "id": repo,
                            "sha": COMMIT,
                            "private": False,
                            "disabled": False,
                            "siblings": [{"rfilename": f} for f in hub.files(kind, repo)],
                        }
                    )
                m = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
                if m:
                    kind, repo, sub = m.group(1), m.group(2), (m.group(4) or "").strip("/")
                    if (kind, repo) not in hub.repos:
                        return self._missing(f"repo {repo} not found")
                    root = hub.repos[(kind, repo)]
                    base = root / sub
                    if not base.is_dir():
                        return self._missing(f"path {sub} not found")
                    recursive = query.get("recursive", ["false"])[0].lower() == "true"
                    items = base.rglob("*") if recursive else base.iterdir()
                    return self._json([hub.entry(kind, repo, str(p.relative_to(root))) for p in sorted(items)])
                m = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)/paths-info/([^/]+)", path)
                if m and self.command == "POST":
                    kind, repo = m.group(1), m.group(2)
                    length = int(self.headers.get("Content-Length") or 0)
                    raw = self.rfile.read(length).decode()
                    if "json" in (self.headers.get("Content-Type") or ""):
                        paths = json.loads(raw).get("paths", [])
                    else:
                        paths = urllib.parse.parse_qs(raw).get("paths", [])
                    root = hub.repos[(kind, repo)]
                    return self._json([hub.entry(kind, repo, p) for p in paths if (root / p).exists()])
                m = re.fullmatch(r"/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if m:
                    kind, repo, rel = ("datasets" if m.group(1) else "models"), m.group(2), m.group(4)
                    if (kind, repo) not in hub.repos:
                        return self._missing(f"repo {repo} not found")
                    full = hub.repos[(kind, repo)] / rel
                    if not full.is_file():
                        return self._missing(f"entry {rel} not found")
                    data = full.read_bytes()
                    start = 0
                    rng = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
                    if rng and self.command == "GET":
                        start = int(rng.group(1))
                        end = int(rng.group(2)) + 1 if rng.group(2) else len(data)
                        self.send_response(206)
                        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                        data = data[start:end]
                    else:
                        self.send_response(200)
                    self.send_header("X-Repo-Commit", COMMIT)
                    self.send_header("ETag", '"' + hashlib.sha256(full.read_bytes()).hexdigest() + '"')
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command == "GET":
                        self.wfile.write(data)
                    return None
                return self._missing(f"no route {self.command} {path}")

            do_GET = do_HEAD = do_POST = _route

        return Handler

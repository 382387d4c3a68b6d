"""What the project's model servers share (the embeddings server, the reward-model scoring server): a FastAPI app
that answers ``GET /health`` and ``GET /v1/models`` for its one served model (the readiness probe of
:class:`codegrpo.services.ManagedService`), OpenAI-style error bodies, the checks of a request body, the command
line and the start of a server; and what their clients share, the pause between two tries of a request."""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any, Callable, Sequence


def model_app(title: str, served_name: str):
    """``(app, error, read_body)`` for one served model.

    ``error(status, message, kind)`` is an OpenAI-style error response; ``await read_body(request)`` is ``(body,
    None)`` for a JSON object that names no model or ``served_name``, else ``(None, error response)``."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI(title=title, version="1")
    created = int(time.time())

    @app.get("/health")
    def health():
        return {"status": "ok", "model": served_name}

    @app.get("/v1/models")
    def models():
        return {
            "object": "list",
            "data": [{"id": served_name, "object": "model", "created": created, "owned_by": "codegrpo"}],
        }

    def error(status: int, message: str, kind: str = "invalid_request_error"):
        return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "code": status}})

    async def read_body(request):
        try:
            body = await request.json()
        except Exception:
            return None, error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return None, error(400, "request body must be a JSON object")
        name = body.get("model")
        if name not in (None, "", served_name):
            return None, error(404, f"model {name!r} is not served here; served: {served_name!r}", "not_found_error")
        return body, None

    return app, error, read_body


def server_args(
    doc: str, port: int, own: Callable[[argparse.ArgumentParser], Any], argv: Sequence[str] | None
) -> argparse.Namespace:
    """The command line of a model server (its module docstring's first paragraph as the description): ``--host``,
    ``--port`` (default ``port``), the server's own arguments (``own(parser)``), ``--device``, ``--log-level``.
    Configures logging at that level and keeps the Hugging Face Hub offline."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=port)
    own(ap)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--log-level", default="info")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return args


def serve(log: logging.Logger, what: str, name: str, load: Callable[[], Any], create_app, args) -> None:
    """Load the served model (``load()``), log what was loaded as ``name``, in how long, and where it listens, and
    run ``create_app(model, name)`` under uvicorn on ``args.host``:``args.port``."""
    t0 = time.perf_counter()
    model = load()
    log.info(
        "loaded %s as %r in %.1fs; listening on http://%s:%d/v1",
        what,
        name,
        time.perf_counter() - t0,
        args.host,
        args.port,
    )
    import uvicorn

    uvicorn.run(create_app(model, name), host=args.host, port=args.port, log_level=args.log_level)


def retry_pause(log: logging.Logger, what: str, err: BaseException, attempt: int, attempts: int, delay: float) -> float:
    """A client's pause after failed try ``attempt`` (0-based) of ``attempts``: log ``<what>: <err> (attempt
    i/n), retrying in <delay>s``, sleep ``delay`` seconds; the next delay (doubled, at most 30 s)."""
    log.warning("%s: %s (attempt %d/%d), retrying in %.1fs", what, err, attempt + 1, attempts, delay)
    time.sleep(delay)
    return min(delay * 2, 30.0)

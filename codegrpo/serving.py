"""What the project's model servers share (the embeddings server, the reward-model scoring server): a FastAPI app
that answers ``GET /health`` and ``GET /v1/models`` for its one served model (the readiness probe of
:class:`codegrpo.services.ManagedService`), OpenAI-style error bodies, and the checks of a request body."""

from __future__ import annotations

import time


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

"""A small OpenAI-compatible embeddings server over a local sentence-transformers model (CPU default).

Endpoints: ``POST /v1/embeddings`` (``input`` a string or a list of strings, ``encoding_format`` float or base64;
returns ``data``/``model``/``usage`` like the OpenAI API), ``GET /v1/models``, ``GET /health``.
Embeddings are L2-normalised (as vLLM's embedding pooler does). It binds to 127.0.0.1 by default.

    python -m codegrpo.embed_server --port 8000 [--model-path DIR] [--served-model-name all-MiniLM-L6-v2]

Without ``--model-path`` it serves the packaged all-MiniLM-L6-v2 (weights sha256-checked, offline).
On GPU nodes the same client code talks to vLLM instead (``codegrpo.services``).
"""

import argparse
import base64
import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger("codegrpo.embed_server")


def create_app(model, served_name: str, max_inputs: int = 4096):
    """The FastAPI app serving ``model`` (anything with a sentence-transformers ``encode``) as ``served_name``."""
    import numpy as np
    from fastapi import Request
    from starlette.concurrency import run_in_threadpool

    from codegrpo.serving import model_app

    app, error, read_body = model_app("codegrpo embeddings", served_name)
    lock = threading.Lock()  # one encode at a time: torch already uses every core

    def encode(texts):
        with lock:
            return model.encode(
                texts,
                batch_size=min(64, len(texts)),
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        body, bad = await read_body(request)
        if bad is not None:
            return bad
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return error(400, "'input' must be a string or a list of strings")
        if not texts or len(texts) > max_inputs:
            return error(400, f"'input' must hold 1..{max_inputs} strings, got {len(texts)}")
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            return error(400, f"encoding_format must be 'float' or 'base64', got {fmt!r}")
        vecs = await run_in_threadpool(encode, texts)  # keeps /health answering while encoding
        tokenizer = getattr(model, "tokenizer", None)
        n_tokens = 0
        if tokenizer is not None:
            try:
                n_tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
            except Exception:
                n_tokens = 0
        data = []
        for i, v in enumerate(vecs):
            if fmt == "base64":
                emb: Any = base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
            else:
                emb = [float(x) for x in v]
            data.append({"object": "embedding", "index": i, "embedding": emb})
        return {
            "object": "list",
            "data": data,
            "model": served_name,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }

    return app


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--model-path", default="", help="sentence-transformers directory (default: packaged MiniLM)")
    ap.add_argument(
        "--served-model-name",
        default="",
        help="name clients pass as 'model' (default: the packaged model's name, or the directory name)",
    )
    ap.add_argument(
        "--sha256",
        default="",
        help="expected sha256 of model.safetensors (default: the pinned "
        "MiniLM sha for the packaged model, no check for another directory)",
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--log-level", default="info")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from codegrpo.rewards.embedding import MINILM_NAME, load_local_model

    packaged = not args.model_path
    name = args.served_model_name or (MINILM_NAME if packaged else os.path.basename(args.model_path.rstrip("/")))
    t0 = time.perf_counter()
    model = load_local_model(args.model_path, args.device, args.sha256)
    log.info(
        "loaded %s as %r in %.1fs; listening on http://%s:%d/v1",
        args.model_path or "packaged MiniLM",
        name,
        time.perf_counter() - t0,
        args.host,
        args.port,
    )
    import uvicorn

    uvicorn.run(create_app(model, name), host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()

"""A small OpenAI-compatible embeddings server over a local sentence-transformers model (CPU default).

Endpoints: ``POST /v1/embeddings`` (``input`` a string or a list of strings, ``encoding_format`` float or base64;
returns ``data``/``model``/``usage`` like the OpenAI API), ``GET /v1/models``, ``GET /health``.
Embeddings are L2-normalised (as vLLM's embedding pooler does). It binds to 127.0.0.1 by default.

    python -m codegrpo.embed_server --port 8000 [--model-path DIR] [--served-model-name all-MiniLM-L6-v2]

Without ``--model-path`` it serves the packaged all-MiniLM-L6-v2 (weights sha256-checked, offline).
On GPU nodes the same client code talks to vLLM instead (``codegrpo.services``).
"""

import base64
import logging
import os
import threading
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
    from codegrpo.serving import serve, server_args

    def own(ap):
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

    args = server_args(__doc__, 8000, own, argv)
    from codegrpo.rewards.embedding import MINILM_NAME, load_local_model

    packaged = not args.model_path
    name = args.served_model_name or (MINILM_NAME if packaged else os.path.basename(args.model_path.rstrip("/")))
    what = args.model_path or "packaged MiniLM"
    serve(log, what, name, lambda: load_local_model(args.model_path, args.device, args.sha256), create_app, args)


if __name__ == "__main__":
    main()

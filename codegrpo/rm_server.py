"""The scoring server of a learned reward model (AceCodeRM and checkpoints of its layout; docs/dhrcl.md).

Endpoints: ``POST /v1/score`` (``{"model": name, "pairs": [[question, response], ...]}`` → ``{"scores": [...],
"model": name}``, one float per pair, :class:`codegrpo.rewards.reward_model.RewardModelScorer`), ``GET /v1/models``
(the readiness probe of :class:`codegrpo.services.ManagedService`), ``GET /health``. Binds to 127.0.0.1 by default.

    python -m codegrpo.rm_server --model-path DIR [--served-model-name NAME] [--device cuda] [--dtype bfloat16]
"""

import logging
import os
import threading

log = logging.getLogger("codegrpo.rm_server")


def create_app(scorer, served_name: str, max_pairs: int = 4096):
    """The FastAPI app serving ``scorer`` (anything with ``score(pairs) -> list[float]``) as ``served_name``."""
    from fastapi import Request
    from starlette.concurrency import run_in_threadpool

    from codegrpo.serving import model_app

    app, error, read_body = model_app("codegrpo reward model", served_name)
    lock = threading.Lock()  # one forward pass at a time

    def score(pairs):
        with lock:
            return scorer.score(pairs)

    @app.post("/v1/score")
    async def score_pairs(request: Request):
        body, bad = await read_body(request)
        if bad is not None:
            return bad
        pairs = body.get("pairs")
        if (
            not isinstance(pairs, list)
            or not pairs
            or len(pairs) > max_pairs
            or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in pairs)
        ):
            return error(400, f"'pairs' must hold 1..{max_pairs} [question, response] string pairs")
        scores = await run_in_threadpool(score, [tuple(p) for p in pairs])
        return {"model": served_name, "scores": scores}

    return app


def main(argv: list[str] | None = None) -> None:
    from codegrpo.serving import serve, server_args

    def own(ap):
        ap.add_argument("--model-path", required=True, help="Hugging Face folder of the reward model")
        ap.add_argument("--served-model-name", default="", help="name clients pass as 'model' (default: the folder)")
        ap.add_argument("--value-head-prefix", default="v_head.summary")
        ap.add_argument("--dtype", default="float32")
        ap.add_argument("--max-length", type=int, default=8192)
        ap.add_argument("--batch-size", type=int, default=8)

    args = server_args(__doc__, 8001, own, argv)
    from codegrpo.rewards.reward_model import RewardModelScorer

    name = args.served_model_name or os.path.basename(args.model_path.rstrip("/"))
    keys = ("value_head_prefix", "dtype", "device", "max_length", "batch_size")

    def load():
        return RewardModelScorer(args.model_path, **{k: getattr(args, k) for k in keys})

    serve(log, f"reward model {args.model_path}", name, load, create_app, args)


if __name__ == "__main__":
    main()

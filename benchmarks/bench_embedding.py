"""Identifier reward on a GRPO-shaped batch: batched embedding requests vs one request per sample.

Both paths talk to the same loopback OpenAI-compatible server (``codegrpo.embed_server`` over the packaged
all-MiniLM-L6-v2, started here with ``codegrpo.services``):

* per-sample — the reference procedure: for each sample one ``embeddings.create`` with [candidate summary,
  reference summary], serially;
* batched    — ``compute_score_batch`` for ``sk2decompile_identifier``: distinct summaries of the whole batch,
  one request per chunk; then a second step with new candidates and the same references (cache hits).

The batch: 16 prompts of the shipped ident-phase examples (norm2code) × 16 samples — the exact source, the
placeholder IR, partly renamed sources, deleted lines, empty answers and about 30 % duplicates.

    .venv/bin/python benchmarks/bench_embedding.py [--prompts 16] [--samples 16] [--chunk-size 256]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from codegrpo.rewards import compute_score_batch, sk2d  # noqa: E402
from codegrpo.rewards import embedding as E  # noqa: E402
from codegrpo.services import embedding_service  # noqa: E402

DATA = REPO / "data" / "sk2decompile" / "norm2code-examples.jsonl"
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{3,}\b")


def _variant(src: str, ir: str, kind: str, rng: random.Random) -> str:
    if kind == "exact":
        return src
    if kind == "ir":
        return ir
    if kind == "renamed":
        names = sorted(set(_IDENT.findall(src)))
        pick = set(rng.sample(names, k=max(1, len(names) // 3))) if names else set()
        return _IDENT.sub(lambda m: f"v_{m.group(0)[:2]}{rng.randrange(9)}" if m.group(0) in pick else m.group(0), src)
    if kind == "deleted":
        lines = src.split("\n")
        if len(lines) > 2:
            del lines[rng.randrange(1, len(lines) - 1)]
        return "\n".join(lines)
    return ""


def build_batch(n_prompts: int, n_samples: int, seed: int = 0, step: int = 0):
    rows = [json.loads(line) for line in DATA.open(encoding="utf-8")]
    rng = random.Random(seed * 1000 + step)
    chosen = [rows[i % len(rows)] for i in range(n_prompts)]
    kinds = ["exact", "ir", "renamed", "renamed", "renamed", "deleted", "deleted", "empty"]
    sols, gts = [], []
    for r in chosen:
        src = r["output"]
        ir = r["input"].split("\n", 1)[1].rsplit("\n# What is the source code?", 1)[0]
        group = []
        for j in range(n_samples):
            if group and rng.random() < 0.2:
                group.append(rng.choice(group))
            else:
                group.append(_variant(src, ir, kinds[(j + step) % len(kinds)], rng))
        sols += group
        gts += [src] * n_samples
    return sols, gts


def per_sample(sols, gts, settings) -> tuple[list[float], int]:
    """The reference procedure: one 2-text request per scored sample, a plain OpenAI client."""
    import openai

    client = openai.OpenAI(base_url=settings.api_base, api_key="none")
    scores, requests = [], 0
    for s, g in zip(sols, gts):
        a, b = (s or "").strip(), (g or "").strip()
        if not a or not b:
            scores.append(0.0)
            continue
        sa, sb = sk2d.identifier_summary(a), sk2d.identifier_summary(b)
        if not sa or not sb:
            scores.append(0.0)
            continue
        resp = client.embeddings.create(model=settings.model, input=[sa, sb])
        requests += 1
        c = sk2d.cosine(resp.data[0].embedding, resp.data[1].embedding)
        scores.append(c * c)
    return scores, requests


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--chunk-size", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    sols, gts = build_batch(args.prompts, args.samples, args.seed)
    n = len(sols)
    summaries = {sk2d._summary_or_none(x) for x in sols + gts} - {None}
    print(
        f"batch: {args.prompts} prompts x {args.samples} samples = {n}; distinct candidate texts "
        f"{len(set(sols))}; distinct summaries to embed {len(summaries)}"
    )
    with embedding_service({"backend": "local"}) as svc:
        os.environ.update(svc.env)
        settings = E.settings_from_env({"chunk_size": args.chunk_size})
        print(f"server: {settings.api_base} model {settings.model}")
        per_sample(sols[:4], gts[:4], settings)  # warm both paths' connections and the model
        t0 = time.perf_counter()
        ref, ref_requests = per_sample(sols, gts, settings)
        t_ref = time.perf_counter() - t0
        print(f"per-sample (reference): {ref_requests:4d} requests  {t_ref:7.3f} s  {n / t_ref:8.1f} samples/s")

        E.reset_embedders()
        emb = E.get_embedder({"chunk_size": args.chunk_size})
        t0 = time.perf_counter()
        out = compute_score_batch(
            ["sk2decompile_identifier"] * n, sols, gts, [None] * n, embedding={"chunk_size": args.chunk_size}
        )
        t_batch = time.perf_counter() - t0
        req_batch = emb.requests
        got = [o["score"] for o in out]
        diff = max(abs(a - b) for a, b in zip(got, ref))
        print(
            f"batched (cold cache):   {req_batch:4d} requests  {t_batch:7.3f} s  {n / t_batch:8.1f} samples/s"
            f"   x{t_ref / t_batch:.1f} faster, {ref_requests / max(req_batch, 1):.0f}x fewer requests;"
            f" max |score diff| vs per-sample {diff:.2e}"
        )
        sols2, gts2 = build_batch(args.prompts, args.samples, args.seed, step=1)
        t0 = time.perf_counter()
        compute_score_batch(
            ["sk2decompile_identifier"] * n, sols2, gts2, [None] * n, embedding={"chunk_size": args.chunk_size}
        )
        t_step2 = time.perf_counter() - t0
        print(
            f"batched, next step:     {emb.requests - req_batch:4d} requests  {t_step2:7.3f} s  "
            f"{n / t_step2:8.1f} samples/s   (cache hits so far {emb.cache_hits})"
        )
        if diff > 1e-4:
            raise SystemExit(f"batched scores differ from per-sample scores by {diff}")
    print(
        f"RESULT requests {ref_requests} -> {req_batch}; wall {t_ref:.3f} s -> {t_batch:.3f} s (x{t_ref / t_batch:.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

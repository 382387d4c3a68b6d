"""Measure the reward-model scoring server's GPU memory and scoring throughput in AceCodeRM-7B's shape on one GPU.

Checks the budget's estimate of the server (``codegrpo.budget.reward_model_memory``, docs/budget.md) against
the real scorer. No weights are downloaded. The folder holds AceCodeRM-7B's architecture (Qwen2.5-Coder-7B:
28 layers, hidden 3584, ffn 18944, 28 / 4 heads, vocab 152064), a tokenizer built offline, and only the value
head's tensors. ``from_pretrained`` initialises the missing backbone weights at random, which needs the same
memory and compute as the released weights. The run goes through
:class:`codegrpo.rewards.reward_model.RewardModelScorer`, the code the server runs. It records:

* ``weights_bytes``: GPU memory allocated after loading;
* ``peak_bytes`` / ``peak_reserved_bytes``: the peak during one ``score`` call over ``batch_size`` chats of
  ``max_length`` tokens (the budget's worst case), and the seconds it took (tokens per second);
* ``padding_max_abs_diff``: the largest difference between a chat's score in a right-padded batch of mixed
  lengths and its score alone (bf16);
* the budget's estimate for the same settings.

Usage: ``python benchmarks/rm_memory_probe.py --out rm_probe.json`` (about 2 minutes on one H200);
``--tiny --device cpu`` is a smoke run of the script itself.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

# a Qwen2 shape: (hidden_size, intermediate_size, layers, attention heads, key/value heads, vocab_size)
QWEN2_KEYS = (
    "hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads vocab_size".split()
)
ACECODERM_7B = dict(zip(QWEN2_KEYS, (3584, 18944, 28, 28, 4, 152064)), max_position_embeddings=32768)
TINY = dict(zip(QWEN2_KEYS, (64, 128, 2, 4, 2, 1024)), max_position_embeddings=32768)


def build_folder(folder: Path, shape: dict, seed: int = 0) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2Config

    from codegrpo.models import train_tokenizer

    words = [
        "def",
        "return",
        "for",
        "in",
        "range",
        "if",
        "else",
        "x",
        "y",
        "nums",
        "result",
        "append",
        "(",
        ")",
        ":",
        "=",
        "+",
        "-",
        "*",
        "list",
        "int",
        "str",
        "sum",
        "len",
        "while",
        "True",
        "False",
        "None",
    ]
    rng = torch.Generator().manual_seed(seed)
    corpus = [" ".join(words[int(i)] for i in torch.randint(len(words), (64,), generator=rng)) for _ in range(200)]
    tok = train_tokenizer(corpus, vocab_size=512)
    Qwen2Config(
        **shape,
        tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    ).save_pretrained(folder)
    tok.save_pretrained(folder)
    h = shape["hidden_size"]
    save_file(
        {"v_head.summary.weight": torch.randn((1, h), generator=rng) / h**0.5, "v_head.summary.bias": torch.zeros(1)},
        str(folder / "model.safetensors"),
        metadata={"format": "pt"},
    )
    return folder


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=6144)
    ap.add_argument("--tiny", action="store_true", help="a tiny shape (smoke run of this script)")
    args = ap.parse_args(argv)

    import torch

    from codegrpo.budget import reward_model_memory
    from codegrpo.rewards.reward_model import RewardModelScorer

    cuda = args.device.startswith("cuda")
    out: dict = {
        "device": args.device,
        "dtype": args.dtype,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "shape": "tiny" if args.tiny else "AceCodeRM-7B",
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if cuda:
        out["gpu"] = torch.cuda.get_device_name(0)
    import transformers

    out["transformers"] = transformers.__version__
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp) / "rm", TINY if args.tiny else ACECODERM_7B)
        t0 = time.perf_counter()
        scorer = RewardModelScorer(
            folder, dtype=args.dtype, device=args.device, max_length=args.max_length, batch_size=args.batch_size
        )
        out["load_s"] = round(time.perf_counter() - t0, 1)
    if cuda:
        torch.cuda.synchronize()
        out["weights_bytes"] = torch.cuda.memory_allocated()
    words = "def f ( x ) : return x + 1 for i in range ( n ) : result . append ( nums [ i ] )".split()
    long_text = " ".join(words[i % len(words)] for i in range(4 * args.max_length))
    pairs = [
        (f"question {i}: " + long_text[: len(long_text) // 4], f"program {i} " + long_text)
        for i in range(args.batch_size)
    ]
    assert all(len(scorer.encode(q, r)) == args.max_length for q, r in pairs)
    scorer.score([("warm up", "def f(x):\n    return x")])
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    scores = scorer.score(pairs)
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    out.update(
        score_s=round(dt, 3),
        tokens=args.batch_size * args.max_length,
        tokens_per_s=round(args.batch_size * args.max_length / dt),
        scores=scores,
    )
    if cuda:
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        out["activation_peak_bytes"] = out["peak_bytes"] - out["weights_bytes"]
    mixed = [(f"q{i}", "def f(x):\n    return x" + " + 1" * (7 * i)) for i in range(args.batch_size)]
    batched = scorer.score(mixed)
    alone = [scorer.score([p])[0] for p in mixed]
    out["padding_max_abs_diff"] = max(abs(a - b) for a, b in zip(batched, alone))
    out["padding_scores"] = {"batched": batched, "alone": alone}
    if not args.tiny:
        out["budget_estimate"] = reward_model_memory(
            {},
            {
                "model": "TIGER-Lab/AceCodeRM-7B",
                "dtype": args.dtype,
                "batch_size": args.batch_size,
                "max_length": args.max_length,
            },
        )
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps({k: v for k, v in out.items() if k not in ("scores", "padding_scores")}, indent=2))


if __name__ == "__main__":
    main()

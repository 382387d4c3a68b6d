"""Named code-generation evaluation protocols (``evaluate.codegen.protocol``; docs/evaluation.md).

A protocol is a preset of the sampling and benchmark-window settings of ``evaluate.codegen``. With ``custom``
(the schema default) the keys are used as configured; with a named protocol its values **replace** those keys
(applied once, right after the config is validated: :func:`codegrpo.config.validate_config` and the Snakefile),
so every job, result file and table note sees the values actually used. Each result records its protocol
(``provenance.config.protocol``), and the DHRCL table's notes print every value (:func:`describe`).

* ``verpo``: VeRPO's template (arXiv 2601.03525), which the DHRCL paper compares against: temperature 0.6,
  Pass@1 by the unbiased estimator over ``n_samples`` samples, LiveCodeBench v6 problems dated 2023-05 to
  2025-04, benchmarks HumanEval / HumanEval+ / BigCodeBench Full and Hard / LiveCodeBench v6 (CodeElo: published
  numbers only). Not stated there, so reconstructed: top_p 0.95 and 10 samples per problem.
* ``project``: this project's earlier choices: temperature 0.8, top_p 0.95, 10 samples, pass@1 and pass@5,
  LiveCodeBench problems from 2025-02-01 (after release_v5's end).
"""

from __future__ import annotations

from typing import Any, MutableMapping

CODEGEN_PROTOCOLS: dict[str, dict[str, Any]] = {
    "verpo": {
        "settings": {"temperature": 0.6, "top_p": 0.95, "n_samples": 10, "ks": [1]},
        "livecodebench": {"start_date": "2023-05-01", "end_date": "2025-04-30"},
        "requires": ["humaneval", "humaneval_plus", "bigcodebench_full", "bigcodebench_hard", "livecodebench"],
        "reconstructed": ["top_p", "n_samples"],
    },
    "project": {
        "settings": {"temperature": 0.8, "top_p": 0.95, "n_samples": 10, "ks": [1, 5]},
        "livecodebench": {"start_date": "2025-02-01", "end_date": None},
        "requires": [],
        "reconstructed": [],
    },
}
PROTOCOLS = ("custom", *CODEGEN_PROTOCOLS)


def apply_codegen_protocol(cfg: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Replace ``evaluate.codegen``'s sampling and LiveCodeBench-window keys by the named protocol's values, in
    place (``custom``: nothing changes). A protocol whose benchmarks are not all configured is an error."""
    gen = (cfg.get("evaluate") or {}).get("codegen")
    if not isinstance(gen, MutableMapping):
        return cfg
    name = gen.get("protocol") or "custom"
    if name == "custom":
        return cfg
    if name not in CODEGEN_PROTOCOLS:
        raise ValueError(f"evaluate.codegen.protocol: unknown protocol {name!r}; one of {', '.join(PROTOCOLS)}")
    proto = CODEGEN_PROTOCOLS[name]
    missing = [b for b in proto["requires"] if b not in (gen.get("benchmarks") or [])]
    if missing:
        raise ValueError(
            f"evaluate.codegen.protocol {name}: evaluate.codegen.benchmarks lacks {missing} (the "
            f"protocol's benchmarks: {proto['requires']}); add them or use protocol custom"
        )
    gen.update({k: (list(v) if isinstance(v, list) else v) for k, v in proto["settings"].items()})
    lcb = gen.get("livecodebench")
    if isinstance(lcb, MutableMapping):
        lcb.update(proto["livecodebench"])
    else:
        gen["livecodebench"] = dict(proto["livecodebench"])
    return cfg


def describe(protocol: str | None, sampling: dict | None, ks, window=None, splits=None) -> str:
    """One table note: the protocol and every value it evaluated with."""
    s = sampling or {}
    name = protocol or "custom"
    parts = [
        f"temperature {s.get('temperature')}",
        f"top_p {s.get('top_p')}",
        f"{s.get('n')} samples per problem",
        "pass@" + "/".join(str(k) for k in (ks or [])) + " by the unbiased estimator (Chen et al., 2021)",
    ]
    if s.get("max_new_tokens") is not None:
        parts.append(f"max {s['max_new_tokens']} new tokens")
    if window:
        parts.append(f"LiveCodeBench contest dates {window[0] or '…'} to {window[1] or '…'}")
    if splits:
        parts.append(f"BigCodeBench splits {', '.join(splits)}")
    rec = CODEGEN_PROTOCOLS.get(name, {}).get("reconstructed") or []
    tail = f" (reconstructed: {', '.join(rec)})" if rec else ""
    return f"Code-generation protocol '{name}': " + "; ".join(parts) + tail + "."

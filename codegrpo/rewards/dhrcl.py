"""DHRCL rewards for KodCode (dense hierarchical rewards, combined per curriculum stage).

Components of one completion ``y`` (its program is :func:`codegrpo.contracts.extract_code` of the text: the last
```python block, else the last bare ``` block, else the whole text when it has no fence; docs/dhrcl.md):

* ``r_syntax``: tree-sitter (Python grammar) top-level units of the module; a unit is valid iff its subtree has
  no error node; weights are the units' token lengths (policy tokenizer when given, else bytes);
  ``sum(w v) / sum(w)``, 0 when no unit.
* ``r_exec``: 1 if the solution module imports (runs) without error within the sandbox limits; an empty or
  comment-only completion is not a program and scores 0.
* ``r_pass``: passed / collected tests (KodCode's pytest harness in :mod:`codegrpo.sandbox`).
* ``r_ast``: similarity of normalised ASTs against the reference solution (``1 - TED / max size`` with apted,
  node-capped; or Jaccard over parent->child node-type pairs); 0 if ``y`` does not parse strictly
  (:mod:`codegrpo.rewards.ast_similarity`).

Stage combinations (``a_*`` are means over the **whole rollout batch**, which is why this is a batch scorer):

* stage 1: ``r_pass + r_syntax + a_syntax * (r_exec + r_ast)``
* stage 2: ``r_pass + r_exec + a_exec * (r_syntax + r_ast)``
* stage 3 (reconstructed): ``r_pass + r_ast + a_pass * (r_syntax + r_exec)``; alternative
  ``stage3_form="secondary"``: ``r_pass + a_pass * (r_ast + r_syntax + r_exec)``

Variants: ``full`` (stage from the curriculum), ``no_ast`` (r_ast removed from every formula), ``no_curriculum``
(stage 3 from step 0), ``fixed_schedule`` and ``uniform_weights`` (reward as ``full``; they change the schedule
and the token weights), baselines ``binary`` (all tests pass), ``pass_rate`` (r_pass), ``static_dense``
(fixed-weight sum of the four components), ``verpo`` (VeRPO's per-test weighted dense reward fused with the
binary one, computed per GRPO group: :mod:`codegrpo.rewards.verpo`) and ``reward_model`` (the AceCoder baseline:
the score of a learned reward model served next to the trainer, :mod:`codegrpo.rewards.reward_model`; the four
components are still computed and logged, they do not enter the score).

Every sample returns the same keys (every variant: the registry declares them): ``score``, the four components,
``a_syntax``, ``a_exec``, ``a_pass``, ``stage``, ``all_passed``, ``timed_out``, ``hack_detected``, ``hack_guard``,
``r_dense``, VeRPO's per-test weighted dense term of the sample's GRPO group (computed for every variant from
the same per-test outcomes, so runs can be compared on it; only ``verpo`` scores with it:
``score = all_passed + beta * r_dense``), and ``rm_score`` (the reward model's score; 0 for the other variants).

``hack_detected`` is 1 when a guard of the sandbox's test harness fired on the sample (docs/sandbox.md,
*Guards*) and ``hack_guard`` says which: ``1 + codegrpo.sandbox.HACK_GUARDS.index(name)``, 0 for none. Such a
sample scores 0 with every component 0. The trainer logs the per-step rate as ``reward/hack_detected/mean`` in
metrics.jsonl, and the run figure plots it.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from codegrpo.contracts import DHRCL_RESULT_KEYS, extract_code
from codegrpo.rewards.ast_similarity import r_ast

log = logging.getLogger(__name__)

VARIANTS = (
    "full",
    "no_ast",
    "no_curriculum",
    "fixed_schedule",
    "uniform_weights",
    "binary",
    "pass_rate",
    "static_dense",
    "reward_model",
    "verpo",
)
RESULT_KEYS = ("score", *DHRCL_RESULT_KEYS)


# ---------------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------------
@dataclass
class DHRCLRewardConfig:
    """Reward settings; the defaults marked (reconstructed) are this project's choices (docs/dhrcl.md)."""

    variant: str = "full"
    stage3_form: str = "structure"  # (reconstructed) "structure" | "secondary"
    ast_method: str = "ted"  # (reconstructed) "ted" | "jaccard"
    ast_node_cap: int = 400  # (reconstructed) larger trees are cut to their first nodes in preorder
    static_weights: dict = field(default_factory=lambda: {"pass": 1.0, "exec": 0.5, "syntax": 0.25, "ast": 0.25})
    timeout_s: float = 10.0
    tokenizer_path: str | None = None
    stage: int | None = None  # explicit stage (tests, evaluation); else the stage provider / env
    rm_response: str = "program"  # (reconstructed) reward_model variant: what the RM scores, program | completion
    verpo: dict = field(default_factory=dict)  # VeRPO's constants (codegrpo.rewards.verpo.VerpoConfig)

    def verpo_config(self):
        from codegrpo.rewards.verpo import VerpoConfig

        unknown = sorted(set(self.verpo) - set(VerpoConfig.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown VeRPO setting(s) {unknown}")
        return VerpoConfig(**self.verpo).validate()

    @classmethod
    def resolve(cls, kwargs: dict | None = None) -> "DHRCLRewardConfig":
        """The scorer's settings: inside a training run those the run stored once in its settings.json
        (``extra.scorer``, ``$CODEGRPO_RUN_SETTINGS``); explicit ``kwargs`` (tests, evaluation) over them."""
        from codegrpo import runsettings

        stored: dict = {}
        path = runsettings.settings_path()
        if path:
            extra = runsettings.load(path).get("extra") or {}
            stored = dict(extra.get("scorer") or {})
        return cls.from_kwargs({**stored, **{k: v for k, v in dict(kwargs or {}).items() if v is not None}})

    @classmethod
    def from_kwargs(cls, kwargs: dict | None) -> "DHRCLRewardConfig":
        kw = dict(kwargs or {})
        cfg = cls()
        for name in (
            "variant",
            "stage3_form",
            "ast_method",
            "ast_node_cap",
            "timeout_s",
            "tokenizer_path",
            "stage",
            "rm_response",
        ):
            if kw.get(name) is not None:
                setattr(cfg, name, kw[name])
        if kw.get("static_weights") is not None:
            cfg.static_weights = {**cfg.static_weights, **dict(kw["static_weights"])}
        for name in ("pass", "exec", "syntax", "ast"):  # flat form: static_w_pass=...
            if kw.get(f"static_w_{name}") is not None:
                cfg.static_weights[name] = float(kw[f"static_w_{name}"])
        cfg.verpo = dict(kw.get("verpo") or {})
        for name in ("alpha", "beta", "kde_bandwidth", "kde_min_bandwidth", "normalise_weights"):  # verpo_alpha=...
            if kw.get(f"verpo_{name}") is not None:
                cfg.verpo[name] = kw[f"verpo_{name}"]
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown DHRCL variant {self.variant!r}; one of {', '.join(VARIANTS)}")
        if self.stage3_form not in ("structure", "secondary"):
            raise ValueError(f"stage3_form must be 'structure' or 'secondary', got {self.stage3_form!r}")
        if self.ast_method not in ("ted", "jaccard"):
            raise ValueError(f"ast_method must be 'ted' or 'jaccard', got {self.ast_method!r}")
        if self.rm_response not in ("program", "completion"):
            raise ValueError(f"rm_response must be 'program' or 'completion', got {self.rm_response!r}")
        if self.stage is not None and int(self.stage) not in (1, 2, 3):
            raise ValueError(f"stage must be 1, 2 or 3, got {self.stage!r}")
        self.ast_node_cap = int(self.ast_node_cap)
        self.verpo_config()  # raises on a bad VeRPO constant
        self.timeout_s = float(self.timeout_s)


# ---------------------------------------------------------------------------------------------------------
# Stage source: the curriculum sets it (through a provider callable registered by the trainer side)
# ---------------------------------------------------------------------------------------------------------
_STAGE_PROVIDER: Callable[[], int] | None = None


def set_stage_provider(fn: Callable[[], int] | None) -> None:
    """Install the function that returns the current curriculum stage (the verl adapter reads a Ray actor)."""
    global _STAGE_PROVIDER
    _STAGE_PROVIDER = fn


def current_stage(cfg: DHRCLRewardConfig) -> int:
    if cfg.variant == "no_curriculum":
        return 3
    if cfg.stage is not None:
        return int(cfg.stage)
    if _STAGE_PROVIDER is not None:
        return int(_STAGE_PROVIDER())
    env = os.environ.get("CODEGRPO_DHRCL_STAGE")
    return int(env) if env else 1


# ---------------------------------------------------------------------------------------------------------
# Code extraction
# ---------------------------------------------------------------------------------------------------------
# codegrpo.contracts.extract_code: the same program evaluation (codegrpo.eval.codegen) reads.


# ---------------------------------------------------------------------------------------------------------
# r_syntax
# ---------------------------------------------------------------------------------------------------------
_TS_LOCAL = threading.local()


def _ts_parser():
    parser = getattr(_TS_LOCAL, "parser", None)
    if parser is None:
        import tree_sitter_python
        from tree_sitter import Language, Parser

        parser = Parser(Language(tree_sitter_python.language()))
        _TS_LOCAL.parser = parser
    return parser


def syntax_units(code: str) -> list[tuple[str, bool]]:
    """(unit text, valid) for each named top-level child of the module (comments excluded)."""
    data = code.encode("utf-8", "surrogatepass")
    tree = _ts_parser().parse(data)
    units = []
    for node in tree.root_node.children:
        if not node.is_named or node.type == "comment":
            continue
        text = data[node.start_byte : node.end_byte].decode("utf-8", "replace")
        units.append((text, not node.has_error))
    return units


def r_syntax(code: str, tokenizer: Any = None) -> float:
    units = syntax_units(code)
    if not units:
        return 0.0
    total = valid = 0
    for text, ok in units:
        if tokenizer is not None:
            w = len(tokenizer.encode(text, add_special_tokens=False))
        else:
            w = len(text.encode("utf-8", "surrogatepass"))
        total += w
        valid += w if ok else 0
    return valid / total if total else 0.0


_TOKENIZERS: dict[str, Any] = {}


def load_tokenizer(path: str | None):
    if not path:
        return None
    tok = _TOKENIZERS.get(path)
    if tok is None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        _TOKENIZERS[path] = tok
    return tok


# ---------------------------------------------------------------------------------------------------------
# Combination
# ---------------------------------------------------------------------------------------------------------
def combine(comp: dict[str, float], a: dict[str, float], stage: int, cfg: DHRCLRewardConfig) -> float:
    """The scalar reward of one sample given its components, the batch means and the stage."""
    rp, re_, rs, ra = comp["r_pass"], comp["r_exec"], comp["r_syntax"], comp["r_ast"]
    v = cfg.variant
    if v == "verpo":
        raise ValueError("the verpo variant is scored per GRPO group (score_batch), not per sample")
    if v == "binary":
        return float(comp["all_passed"])
    if v == "pass_rate":
        return rp
    if v == "static_dense":
        w = cfg.static_weights
        return w["pass"] * rp + w["exec"] * re_ + w["syntax"] * rs + w["ast"] * ra
    if v == "no_ast":
        ra = 0.0
    if stage == 1:
        return rp + rs + a["a_syntax"] * (re_ + ra)
    if stage == 2:
        return rp + re_ + a["a_exec"] * (rs + ra)
    if cfg.stage3_form == "secondary":
        return rp + a["a_pass"] * (ra + rs + re_)
    return rp + ra + a["a_pass"] * (rs + re_)


def batch_means(comps: Sequence[dict[str, float]]) -> dict[str, float]:
    n = max(len(comps), 1)
    return {
        "a_syntax": sum(c["r_syntax"] for c in comps) / n,
        "a_exec": sum(c["r_exec"] for c in comps) / n,
        "a_pass": sum(c["r_pass"] for c in comps) / n,
    }


def _reference(gt: Any, extra: dict | None) -> tuple[str, str]:
    """(test code, reference solution) from a row's ground truth and extra_info."""
    extra = extra or {}
    tests = extra.get("test_code") or (gt if isinstance(gt, str) else "")
    if isinstance(gt, dict):
        tests = gt.get("test_code") or tests
    if not tests:
        raise ValueError("kodcode sample without tests: ground_truth and extra_info['test_code'] are empty")
    return tests, extra.get("reference_solution") or ""


def components(
    codes: Sequence[str], tests: Sequence[str], refs: Sequence[str], cfg: DHRCLRewardConfig, sandbox=None
) -> list[dict[str, float]]:
    """The four components of every sample (tests run in parallel on the sandbox pool, duplicates once)."""
    from codegrpo.sandbox import HACK_GUARDS, default_sandbox

    sb = sandbox or default_sandbox()
    uniq: dict[tuple[str, str], int] = {}
    for c, t in zip(codes, tests):
        uniq.setdefault((c, t), len(uniq))
    pairs = list(uniq)
    runs = sb.run_tests_many(pairs, timeout_s=cfg.timeout_s)
    tok = load_tokenizer(cfg.tokenizer_path)
    out = []
    for c, t, ref in zip(codes, tests, refs):
        res = runs[uniq[(c, t)]]
        has_program = bool(syntax_units(c))  # empty / comment-only output executes "successfully": not a program
        rs = r_syntax(c, tok) if has_program else 0.0
        ra = r_ast(c, ref, cfg.ast_method, cfg.ast_node_cap) if (has_program and ref) else 0.0
        executed = res.executed and has_program
        hack = getattr(res, "hack", None)
        if hack is not None:  # a guard fired: the sample scores nothing
            rs = ra = 0.0
            executed = False
        out.append(
            {
                "r_syntax": rs,
                "r_exec": float(executed),
                "r_pass": res.pass_rate if executed else 0.0,
                "r_ast": ra,
                "all_passed": float(res.all_passed and executed),
                "timed_out": float(res.timed_out),
                "hack_detected": float(hack is not None),
                "hack_guard": float(HACK_GUARDS.index(hack) + 1 if hack in HACK_GUARDS else (hack is not None)),
                # per-test outcomes (VeRPO); a sample that did not execute passes none
                "outcomes": tuple((nid, bool(ok and executed)) for nid, ok in getattr(res, "outcomes", ())),
            }
        )
    hacks = [r.hack for r in runs if getattr(r, "hack", None)]
    if hacks:
        log.warning(
            "sandbox harness guards fired on %d of %d distinct samples: %s",
            len(hacks),
            len(runs),
            {h: hacks.count(h) for h in sorted(set(hacks))},
        )
    return out


def reward_model_scores(
    solution_strs: Sequence[str],
    codes: Sequence[str],
    extra_infos: Sequence[dict | None],
    cfg: DHRCLRewardConfig,
    kwargs: dict,
) -> list[float]:
    """The learned reward model's score of every sample: the chat [user: the row's question, assistant: the
    program (``rm_response: program``) or the whole completion], scored by the run's RM server."""
    from codegrpo.rewards.reward_model import client_from_run, response_text

    questions = []
    for i, e in enumerate(extra_infos):
        q = (e or {}).get("question")
        if not isinstance(q, str) or not q.strip():
            raise ValueError(
                f"kodcode sample {i} has no extra_info['question'] (the reward model's user turn); "
                "rebuild the KodCode Parquet files with this version of the data stage"
            )
        questions.append(q)
    pairs = [(q, response_text(s, c, cfg.rm_response)) for q, s, c in zip(questions, solution_strs, codes)]
    return client_from_run(kwargs).score(pairs)


def score_batch(
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict | None],
    sandbox=None,
    **kwargs,
) -> list[dict[str, float]]:
    """Batch scorer of ``kodcode`` (the reward table's entry): one result dict per sample, all with :data:`RESULT_KEYS`."""
    cfg = DHRCLRewardConfig.resolve(kwargs)
    stage = current_stage(cfg)
    codes = [extract_code(s) for s in solution_strs]
    tests, refs = zip(*[_reference(g, e) for g, e in zip(ground_truths, extra_infos)]) if codes else ((), ())
    comps = components(codes, tests, refs, cfg, sandbox=sandbox)
    a = batch_means(comps)
    rm_scores = [0.0] * len(codes)
    if cfg.variant == "reward_model":
        rm_scores = reward_model_scores(solution_strs, codes, extra_infos, cfg, kwargs)
    verpo = _verpo(comps, tests, extra_infos, cfg)
    out = []
    for i, (comp, rm) in enumerate(zip(comps, rm_scores)):
        if cfg.variant == "reward_model":
            score = rm  # the RM never sees the tests: its score is the reward, whatever the harness saw
        elif cfg.variant == "verpo":
            score = 0.0 if comp["hack_detected"] else verpo[i]["score"]
        else:
            score = 0.0 if comp["hack_detected"] else combine(comp, a, stage, cfg)
        res = {
            "score": score,
            "r_syntax": comp["r_syntax"],
            "r_exec": comp["r_exec"],
            "r_pass": comp["r_pass"],
            "r_ast": comp["r_ast"],
            **a,
            "stage": float(stage),
            "all_passed": comp["all_passed"],
            "timed_out": comp["timed_out"],
            "hack_detected": comp["hack_detected"],
            "hack_guard": comp["hack_guard"],
            "rm_score": rm,
            "r_dense": verpo[i]["r_dense"],
        }
        out.append({k: float(res[k]) for k in RESULT_KEYS})
    return out


def group_key(tests: str, extra: dict | None) -> tuple:
    """The GRPO group of a sample: its prompt's row (``extra_info.index``, with the split) and its tests.
    verl repeats each prompt ``n`` times within one batch; the batch scorer sees no ``uid``."""
    extra = extra or {}
    return (extra.get("split"), extra.get("index"), extra.get("question_id"), tests)


def _verpo(
    comps: Sequence[dict], tests: Sequence[str], extra_infos: Sequence[dict | None], cfg: DHRCLRewardConfig
) -> list[dict[str, float]]:
    """VeRPO's fused reward of every sample, group by group (:mod:`codegrpo.rewards.verpo`)."""
    from codegrpo.rewards import verpo

    vcfg = cfg.verpo_config()
    out: list[dict[str, float]] = [{}] * len(comps)
    for idx in verpo.groups([group_key(t, e) for t, e in zip(tests, extra_infos)]).values():
        res = verpo.group_rewards([comps[i]["outcomes"] for i in idx], [comps[i]["all_passed"] for i in idx], vcfg)
        for i, r in zip(idx, res):
            out[i] = r
    return out

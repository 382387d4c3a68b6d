"""DHRCL reward components and stage combinations on real KodCode records (real sandbox, tree-sitter, apted)."""

from __future__ import annotations

import pytest

from codegrpo.sandbox import Sandbox, SandboxLimits
from codegrpo.rewards import compute_score_batch, registered
from codegrpo.rewards import dhrcl as d


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxLimits(wall_s=30, cpu_s=30), workers=2) as sb:
        yield sb


# ---- components (code extraction: codegrpo.contracts.extract_code, tests/test_contracts.py) -------------
def test_r_syntax_token_weighted():
    good = "import os\n"
    bad = "def f(:\n    return 1\n"
    assert d.r_syntax(good) == 1.0
    assert d.r_syntax(bad) == 0.0
    mixed = good + bad
    expect = len(b"import os") / (len(b"import os") + len(bad.rstrip("\n").encode()))
    assert d.r_syntax(mixed) == pytest.approx(expect)
    assert d.r_syntax("") == 0.0 and d.r_syntax("# only a comment\n") == 0.0

    class CharTokenizer:  # a tokenizer with a known length: one token per character
        def encode(self, text, add_special_tokens=False):
            return list(text)

    assert d.r_syntax("x = 'é'\n" + bad, CharTokenizer()) == pytest.approx(7 / (7 + len(bad.rstrip("\n"))))


def test_syntax_units_are_top_level_named_children():
    units = d.syntax_units("import os\n# c\ndef f():\n    return 1\nclass A:\n    pass\n")
    assert [ok for _, ok in units] == [True, True, True] and units[1][0].startswith("def f")


# ---- combination ----------------------------------------------------------------------------------------
COMP = {"r_pass": 0.5, "r_exec": 1.0, "r_syntax": 0.8, "r_ast": 0.4, "all_passed": 0.0}
A = {"a_syntax": 0.9, "a_exec": 0.6, "a_pass": 0.3}


@pytest.mark.parametrize(
    "stage,expect",
    [
        (1, 0.5 + 0.8 + 0.9 * 1.0 + 0.9 * 0.4),
        (2, 0.5 + 1.0 + 0.6 * 0.8 + 0.6 * 0.4),
        (3, 0.5 + 0.4 + 0.3 * 0.8 + 0.3 * 1.0),
    ],
)
def test_stage_formulas(stage, expect):
    assert d.combine(COMP, A, stage, d.DHRCLRewardConfig()) == pytest.approx(expect)


def test_variants_and_baselines():
    cfg = d.DHRCLRewardConfig
    assert d.combine(COMP, A, 3, cfg(stage3_form="secondary")) == pytest.approx(0.5 + 0.3 * (0.4 + 0.8 + 1.0))
    assert d.combine(COMP, A, 1, cfg(variant="no_ast")) == pytest.approx(0.5 + 0.8 + 0.9 * 1.0)
    assert d.combine(COMP, A, 2, cfg(variant="binary")) == 0.0
    assert d.combine({**COMP, "all_passed": 1.0}, A, 2, cfg(variant="binary")) == 1.0
    assert d.combine(COMP, A, 1, cfg(variant="pass_rate")) == 0.5
    w = {"pass": 1.0, "exec": 0.5, "syntax": 0.25, "ast": 0.25}
    assert d.combine(COMP, A, 1, cfg(variant="static_dense", static_weights=w)) == pytest.approx(
        0.5 + 0.5 + 0.25 * 0.8 + 0.25 * 0.4
    )
    assert d.current_stage(cfg(variant="no_curriculum", stage=1)) == 3
    with pytest.raises(ValueError, match="unknown DHRCL variant"):
        d.DHRCLRewardConfig.from_kwargs({"variant": "nope"})
    c = d.DHRCLRewardConfig.from_kwargs({"static_w_pass": 2.0, "ast_method": "jaccard", "unrelated": 1})
    assert c.static_weights["pass"] == 2.0 and c.ast_method == "jaccard"


def test_stage_provider_and_env(monkeypatch):
    cfg = d.DHRCLRewardConfig()
    monkeypatch.setenv("CODEGRPO_DHRCL_STAGE", "2")
    assert d.current_stage(cfg) == 2
    d.set_stage_provider(lambda: 3)
    try:
        assert d.current_stage(cfg) == 3
        assert d.current_stage(d.DHRCLRewardConfig(stage=1)) == 1  # an explicit stage wins
    finally:
        d.set_stage_provider(None)


# ---- end to end through the registry ----------------------------------------------------------------------
def test_batch_scores_real_record(record, sandbox):
    ref, tests = record["solution"], record["test_code"]
    sols = [
        "Sure:\n```python\n" + ref + "\n```",  # correct
        "```python\ndef interleave_strings(a, b):\n    return a + b\n```",  # runs, fails some tests
        "```python\ndef interleave_strings(a, b:\n    return a\n```",  # syntax error
        "```python\nimport not_a_module\n" + ref + "\n```",  # import error
    ]
    extra = {"reference_solution": ref, "test_code": tests, "question_id": record["question_id"]}
    out = d.score_batch(sols, [tests] * 4, [extra] * 4, sandbox=sandbox, stage=2)
    assert all(tuple(o) == d.RESULT_KEYS for o in out)
    good, partial, broken, noimport = out
    assert (good["r_pass"], good["r_exec"], good["r_syntax"], good["r_ast"], good["all_passed"]) == (1, 1, 1, 1, 1)
    assert partial["r_exec"] == 1 and 0 < partial["r_pass"] < 1 and partial["all_passed"] == 0
    assert broken["r_exec"] == 0 and broken["r_pass"] == 0 and broken["r_ast"] == 0 and broken["r_syntax"] < 1
    assert noimport["r_exec"] == 0 and noimport["r_pass"] == 0 and noimport["r_syntax"] == 1
    a = d.batch_means([{k: o[k] for k in ("r_syntax", "r_exec", "r_pass")} for o in out])
    for o in out:  # batch means over the whole batch, the same on every sample
        assert (o["a_syntax"], o["a_exec"], o["a_pass"], o["stage"]) == pytest.approx(
            (a["a_syntax"], a["a_exec"], a["a_pass"], 2.0)
        )
        assert o["score"] == pytest.approx(d.combine(o, a, 2, d.DHRCLRewardConfig()))
    assert a["a_exec"] == 0.5


def test_registered_under_kodcode(record, sandbox, monkeypatch):
    assert "kodcode" in registered()
    ref, tests = record["solution"], record["test_code"]
    extra = {"reference_solution": ref, "test_code": tests}
    out = compute_score_batch(["kodcode"] * 2, [ref, "x = ("], [tests] * 2, [extra] * 2, variant="binary")
    assert [o["score"] for o in out] == [1.0, 0.0]
    assert set(out[0]) == set(d.RESULT_KEYS)


def test_empty_completion_is_not_a_program(record, sandbox):
    ref, tests = record["solution"], record["test_code"]
    extra = {"reference_solution": ref, "test_code": tests}
    out = d.score_batch(
        ["", "# just a comment\n", "```python\n\n```"], [tests] * 3, [extra] * 3, sandbox=sandbox, stage=2
    )
    for o in out:
        assert (o["r_exec"], o["r_pass"], o["r_syntax"], o["r_ast"], o["score"]) == (0, 0, 0, 0, 0)


def test_missing_tests_is_a_clear_error(sandbox):
    with pytest.raises(ValueError, match="without tests"):
        d.score_batch(["x = 1"], [""], [{}], sandbox=sandbox)


def test_hack_detected_scores_zero(record, sandbox):
    """A sample that writes into every descriptor (the old report-forgery trick) trips a harness guard: it is
    flagged with the guard that fired and scores 0; the honest samples in the same batch are untouched."""
    from codegrpo.sandbox import HACK_GUARDS

    ref, tests = record["solution"], record["test_code"]
    forger = (
        'import os\nfor fd in range(64):\n    try:\n        os.write(fd, b\'{"test": ["x", true]}\\n\')\n'
        "    except OSError:\n        pass\n" + ref
    )
    extra = {"reference_solution": ref, "test_code": tests}
    out = d.score_batch([ref, forger], [tests] * 2, [extra] * 2, sandbox=sandbox, stage=1)
    good, hacked = out
    assert (good["hack_detected"], good["hack_guard"], good["all_passed"]) == (0.0, 0.0, 1.0)
    assert hacked["hack_detected"] == 1.0 and HACK_GUARDS[int(hacked["hack_guard"]) - 1] == "protocol_violation"
    assert (hacked["score"], hacked["r_pass"], hacked["r_exec"], hacked["r_syntax"], hacked["r_ast"]) == (0, 0, 0, 0, 0)

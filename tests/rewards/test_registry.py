"""The reward table: lazy imports, routing by data_source, batch grouping, fixed keys, clear errors."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import codegrpo.rewards as R


@pytest.fixture
def temp_sources():
    added = []

    def add(name, *args, **kwargs):
        added.append(name)
        added.extend(kwargs.get("aliases", ()))
        return R.register(name, *args, **kwargs)

    yield add
    for name in added:
        R.unregister(name)


REWARD_MODULES = (
    "codegrpo.rewards.sk2d",
    "codegrpo.rewards.dhrcl",
    "codegrpo.rewards.toy",
    "codegrpo.rewards.compile",
    "codegrpo.rewards.embedding",
)


def _loaded_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; which reward modules (and torch/verl) are imported afterwards."""
    probe = (
        code
        + "\nimport json, sys\nprint(json.dumps({m: m in sys.modules for m in "
        + repr(REWARD_MODULES + ("torch", "verl"))
        + "}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_importing_the_table_imports_no_reward_module():
    loaded = _loaded_after("import codegrpo.rewards as r; r.registered(); r.REWARD_TABLE['kodcode']")
    assert not any(loaded.values()), {m for m, v in loaded.items() if v}


def test_first_call_imports_only_the_reward_it_needs():
    loaded = _loaded_after("import codegrpo.rewards as r; r.compute_score('toy_target_chars', '12ab', '')")
    assert {m for m, v in loaded.items() if v} == {"codegrpo.rewards.toy"}
    loaded = _loaded_after(
        "import codegrpo.rewards as r; "
        "r.compute_score_batch(['sk2decompile_structure_sim'], ['int x;'], ['int x;'], [{}])"
    )
    assert loaded["codegrpo.rewards.sk2d"] and loaded["codegrpo.rewards.compile"]
    assert not loaded["codegrpo.rewards.dhrcl"] and not loaded["codegrpo.rewards.toy"]
    assert not loaded["torch"] and not loaded["verl"]


def test_every_table_entry_names_real_functions():
    """A typo in a module or function name of the table fails here, not at the first training step."""
    for ds, spec in R.REWARD_TABLE.items():
        scorer = R.get_scorer(ds)
        assert scorer.score_fn is not None or scorer.batch_fn is not None, ds
        for name, fn in ((spec.score, scorer.score_fn), (spec.batch, scorer.batch_fn)):
            if name is not None:
                assert fn is getattr(importlib.import_module(spec.module), name)
    with pytest.raises(R.RewardError, match="codegrpo.rewards.toy.no_such_fn"):
        R._load("t_bad", R.RewardSpec("codegrpo.rewards.toy", score="no_such_fn"))


def test_builtin_keys_registered():
    keys = R.registered()
    assert set(keys) == set(R.REWARD_TABLE)
    for k in (
        "sk2decompile_structure",
        "sk2decompile_structure_sim",
        "sk2decompile_identifier",
        "llm4decompile_exe",
        "kodcode",
        "toy_target_chars",
    ):
        assert k in keys
    assert R.get_scorer("llm4decompile_exe") is R.get_scorer("sk2decompile_structure")


def test_table_keys_cannot_be_replaced(temp_sources):
    with pytest.raises(ValueError, match="reward table"):
        R.register("kodcode", score_fn=lambda *a, **k: 1.0)
    with pytest.raises(ValueError, match="reward table"):
        R.register("t_new", score_fn=lambda *a, **k: 1.0, aliases=("toy_target_chars",))
    assert "t_new" not in R.registered()


def test_declared_keys_are_enforced_on_the_first_result(temp_sources):
    """A table scorer that drops or adds a component fails at once (verl needs the same keys on every sample)."""
    temp_sources("t_declared", score_fn=lambda s, g, e=None, **k: {"score": 1.0, "a": 1.0}, keys=("a", "b"))
    with pytest.raises(R.RewardError, match="t_declared"):
        R.compute_score("t_declared", "x", "")


def test_unknown_data_source_names_it_and_the_keys():
    with pytest.raises(R.UnknownDataSourceError) as ei:
        R.compute_score("no_such_source", "x", "y", {})
    msg = str(ei.value)
    assert "no_such_source" in msg
    for key in R.REWARD_TABLE:
        assert key in msg
    with pytest.raises(R.UnknownDataSourceError, match="nope"):
        R.compute_score_batch(["sk2decompile_structure_sim", "nope"], ["a", "b"], ["a", "b"], [{}, {}])


def test_single_and_batch_route_and_keep_order(temp_sources):
    calls = []

    def batch_fn(sols, gts, infos, **kw):
        calls.append((list(sols), kw))
        return [{"score": float(len(s)), "n_batch": float(len(sols))} for s in sols]

    temp_sources("t_len", batch_fn=batch_fn, aliases=("t_len_alias",))
    temp_sources("t_eq", score_fn=lambda s, g, e=None, **kw: float(s == g))
    out = R.compute_score_batch(
        ["t_len", "t_eq", "t_len_alias", "t_eq", "t_len"],
        ["a", "b", "ccc", "x", "dddd"],
        ["", "b", "", "y", ""],
        [None] * 5,
        scale=2,
    )
    # one batch call for each scorer object's data_source key (alias is its own group)
    assert [c[0] for c in calls] == [["a", "dddd"], ["ccc"]]
    assert calls[0][1] == {"scale": 2}
    assert [r["score"] for r in out] == [1.0, 1.0, 3.0, 0.0, 4.0]
    # mixed batch: every sample carries the union of keys, missing components are 0.0
    assert all(set(r) == {"score", "n_batch"} for r in out)
    assert out[1]["n_batch"] == 0.0 and out[0]["n_batch"] == 2.0
    # single path via batch_fn with a batch of one
    assert R.compute_score("t_len", "abc", "", None) == {"score": 3.0, "n_batch": 1.0}
    # numbers become {"score": float}
    assert R.compute_score("t_eq", "q", "q") == {"score": 1.0}


def test_key_set_must_not_change(temp_sources):
    def fn(s, g, e=None, **kw):
        return {"score": 1.0, "a": 1.0} if s else {"score": 0.0}

    temp_sources("t_keys", score_fn=fn)
    R.compute_score("t_keys", "x", "")
    with pytest.raises(R.RewardError, match="t_keys"):
        R.compute_score("t_keys", "", "")


def test_bad_results_are_clear_errors(temp_sources):
    temp_sources("t_nodict", score_fn=lambda *a, **k: {"value": 1})
    with pytest.raises(R.RewardError, match="without 'score'"):
        R.compute_score("t_nodict", "", "")
    temp_sources("t_short", batch_fn=lambda s, g, e, **k: [])
    with pytest.raises(R.RewardError, match="0 results for 2"):
        R.compute_score_batch(["t_short"] * 2, ["a", "b"], ["a", "b"], [None, None])
    with pytest.raises(ValueError, match="lengths differ"):
        R.compute_score_batch(["t_short"], ["a", "b"], ["a"], [None])
    with pytest.raises(ValueError):
        R.register("t_none")


def test_forward_env_selects_secrets_not_settings():
    env = {
        "CODEGRPO_EMBEDDING_API_BASE": "u",
        "CODEGRPO_COMPILE_MODE": "exact",
        "QWEN3_EMBEDDING_API_KEY": "k",
        "OPENAI_API_KEY": "o",
        "PATH": "/bin",
        "HOME": "/root",
        "MY_KEY": "m",
    }
    assert set(R.forward_env(env)) == {"QWEN3_EMBEDDING_API_KEY", "OPENAI_API_KEY"}
    assert set(R.forward_env(env, names=("MY_KEY",))) == {"QWEN3_EMBEDDING_API_KEY", "OPENAI_API_KEY", "MY_KEY"}


def test_data_source_map_scores_with_another_reward():
    """skeleton_rl.structure_reward: sim_exe routes the structure data source to sim_exe (token_jaccard)."""
    sol = "int func0(int var1) { return var1; }"
    plain = R.compute_score("sk2decompile_structure", sol, sol, {})
    sim = R.compute_score(
        "sk2decompile_structure", sol, sol, {}, data_source_map={"sk2decompile_structure": "sk2decompile_structure_sim"}
    )
    batch = R.compute_score_batch(
        ["llm4decompile_exe"], [sol], [sol], [{}], data_source_map={"llm4decompile_exe": "sk2decompile_structure_sim"}
    )
    assert "type_jaccard" in plain and "token_jaccard" not in plain
    assert "token_jaccard" in sim and "type_jaccard" not in sim
    assert set(batch[0]) == set(sim)

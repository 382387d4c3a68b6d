"""The one settings channel: inside a training run the reward code reads its compile / sandbox settings from the
run's settings.json ($CODEGRPO_RUN_SETTINGS), over the documented environment overrides (embedding: see
tests/rewards/test_embedding.py::test_identifier_reward_reads_the_run_settings)."""

from __future__ import annotations

import json
import os
import time

import pytest

from codegrpo import runsettings
from codegrpo.rewards import compile as C
from codegrpo.rewards import compute_score_batch


def _write(path, settings, served=None):
    path.write_text(json.dumps({"fingerprint": "x", "settings": settings, **({"served": served} if served else {})}))
    return path


def test_run_section_outside_and_inside_a_run(tmp_path, monkeypatch):
    monkeypatch.delenv(runsettings.SETTINGS_ENV, raising=False)
    assert runsettings.run_section("sandbox") is None  # outside a run: explicit arguments are the interface
    path = _write(
        tmp_path / "settings.json",
        {"embedding": {"backend": "local", "model": ""}},
        served={"embedding": {"backend": "openai", "api_base": "http://127.0.0.1:9/v1", "model": "m"}},
    )
    monkeypatch.setenv(runsettings.SETTINGS_ENV, str(path))
    assert runsettings.run_section("embedding") == {
        "backend": "openai",
        "api_base": "http://127.0.0.1:9/v1",
        "model": "m",
    }
    with pytest.raises(runsettings.RunSettingsError, match=r"settings.json: field 'settings.sandbox'"):
        runsettings.run_section("sandbox")
    path.write_text("{not json")
    with pytest.raises(runsettings.RunSettingsError, match="settings.json: not a readable JSON"):
        runsettings.run_section("sandbox")
    monkeypatch.setenv(runsettings.SETTINGS_ENV, str(tmp_path / "gone.json"))
    with pytest.raises(runsettings.RunSettingsError, match="gone.json: cannot read"):
        runsettings.run_section("sandbox")


def test_structure_reward_compiles_with_the_run_compile_mode(tmp_path, monkeypatch):
    """A changed compile mode in settings.json is what the structure reward's engine uses, over
    CODEGRPO_COMPILE_MODE."""
    monkeypatch.setenv("CODEGRPO_COMPILE_MODE", "fast")
    path = _write(
        tmp_path / "settings.json",
        {"compile_reward": {"mode": "exact", "workers": 1, "cache_size": 0, "memory_mb": 512}},
    )
    monkeypatch.setenv(runsettings.SETTINGS_ENV, str(path))
    monkeypatch.setattr(C, "_DEFAULT", None)
    sol = "int func0(int var1) { return var1; }"
    try:
        out = compute_score_batch(["sk2decompile_structure"] * 2, [sol, "int ("], [sol, sol], [{}, {}])
        eng = C._DEFAULT
        assert (eng.mode, eng.workers, eng.cache_size) == ("exact", 1, 0)
        assert f"--as={512 << 20}" in eng._limits or not eng._limits  # no prlimit: no limits at all
        assert eng.stats.exact_runs == 2 and eng.stats.syntax_runs == 0  # fast mode would run -fsyntax-only
        assert [o["compile"] for o in out] == [1.0, 0.0]
    finally:
        if C._DEFAULT is not None:
            C._DEFAULT.close()


def test_default_sandbox_takes_the_run_limits(tmp_path, monkeypatch):
    """A changed sandbox limit in settings.json is what the process-wide sandbox (the DHRCL reward's) uses, over
    CODEGRPO_SANDBOX_LIMITS / _WORKERS."""
    from codegrpo.sandbox import client

    monkeypatch.setenv("CODEGRPO_SANDBOX_LIMITS", json.dumps({"wall_s": 30, "cpu_s": 30}))
    monkeypatch.setenv("CODEGRPO_SANDBOX_WORKERS", "3")
    monkeypatch.delenv(runsettings.SETTINGS_ENV, raising=False)
    assert client.default_sandbox_settings()["wall_s"] == 30  # outside a run: the documented override
    sb_section = {**runsettings.schema_defaults("sandbox"), "wall_s": 1.5, "cpu_s": 2, "workers": 1}
    monkeypatch.setenv(runsettings.SETTINGS_ENV, str(_write(tmp_path / "settings.json", {"sandbox": sb_section})))
    monkeypatch.setattr(client, "_DEFAULT", None)
    try:
        sb = client.default_sandbox()
        assert (sb.limits.wall_s, sb.limits.cpu_s, len(sb._sups)) == (1.5, 2, 1)
        t0 = time.monotonic()
        res = client.run_tests("import time\ntime.sleep(5)\n", "def test_x():\n    assert True\n")
        assert res.timed_out and not res.all_passed and time.monotonic() - t0 < 4.5
    finally:
        if client._DEFAULT is not None:
            client._DEFAULT.close()


def test_schema_defaults_are_the_only_defaults():
    d = runsettings.schema_defaults("compile_reward")
    assert d == {"mode": "fast", "workers": None, "cache_size": 65536, "memory_mb": 1024}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEGRPO_COMPILE_", runsettings.SETTINGS_ENV))}
    assert C.engine_settings(environ=env) == {"scratch": None, **d}


def test_schema_defaults_follow_refs_and_stage_refinements():
    """Nested sections and the RL stages' shared definition ($ref) with each stage's own defaults."""
    assert runsettings.schema_defaults("skeleton_rl")["kl_coef"] == 0.01
    assert runsettings.schema_defaults("skin_rl")["kl_coef"] == 0.02
    assert runsettings.schema_defaults("skin_rl")["structure_reward"] == "exe_type"
    assert runsettings.schema_defaults("dhrcl", "token_weights") == {"tau": 1.0, "w_min": 0.25, "w_max": 4.0}


def test_dhrcl_scorer_settings_take_schema_defaults_for_a_partial_section():
    from codegrpo.verl import dhrcl as vd

    vdef = vd.resolve_variant({}, "full")
    got = vd.scorer_settings({"reward": {"timeout_s": 3}}, vdef, "/tok")
    d = runsettings.schema_defaults("dhrcl", "reward")
    assert got == {
        "variant": vdef["reward"],
        "stage3_form": d["stage3_form"],
        "ast_method": d["ast_method"],
        "ast_node_cap": d["ast_node_cap"],
        "timeout_s": 3.0,
        "tokenizer_path": "/tok",
        "static_weights": {k: float(v) for k, v in d["static_weights"].items()},
    }
    assert "tokenizer_path" not in vd.scorer_settings({"reward": {"use_policy_tokenizer": False}}, vdef, "/tok")


def test_dhrcl_scorer_reads_the_runs_settings_json(tmp_path, monkeypatch):
    """Inside a training run the KodCode scorer takes the settings the run stored once (extra.scorer); explicit
    arguments still win; outside a run the dataclass defaults apply."""
    from codegrpo.rewards.dhrcl import DHRCLRewardConfig
    from codegrpo.verl import dhrcl as vd

    cfg = {"reward": {"ast_method": "jaccard", "static_weights": {"pass": 2.0}, "verpo": {"alpha": 3.0}}}
    scorer = vd.scorer_settings(cfg, vd.resolve_variant({}, "baseline_verpo"), None)
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"fingerprint": "x", "settings": {"extra": {"scorer": scorer}}}))
    monkeypatch.delenv(runsettings.SETTINGS_ENV, raising=False)
    assert DHRCLRewardConfig.resolve().ast_method == DHRCLRewardConfig().ast_method
    monkeypatch.setenv(runsettings.SETTINGS_ENV, str(path))
    got = DHRCLRewardConfig.resolve()
    assert (got.variant, got.ast_method, got.static_weights["pass"], got.verpo["alpha"]) == (
        "verpo",
        "jaccard",
        2.0,
        3.0,
    )
    assert got.static_weights["exec"] == DHRCLRewardConfig().static_weights["exec"]  # not stored: the default
    assert DHRCLRewardConfig.resolve({"ast_method": "ted"}).ast_method == "ted"

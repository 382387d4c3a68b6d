"""Named code-generation evaluation protocols (evaluate.codegen.protocol) and their table notes."""

from __future__ import annotations

import copy

import pytest

from codegrpo.config import ConfigError, load_config, validate_config
from codegrpo.eval.protocols import CODEGEN_PROTOCOLS, apply_codegen_protocol, describe
from codegrpo.tables import protocol_notes, table_dhrcl


def test_paper_config_evaluates_with_verpos_template(repo_root):
    gen = load_config(repo_root / "config" / "paper.yaml", check_files=False)["evaluate"]["codegen"]
    assert gen["protocol"] == "verpo"
    assert (gen["temperature"], gen["ks"], gen["top_p"], gen["n_samples"]) == (0.6, [1], 0.95, 10)
    lcb = gen["livecodebench"]
    assert (lcb["start_date"], lcb["end_date"], lcb["version"]) == ("2023-05-01", "2025-04-30", "release_v6")
    assert {"humaneval", "humaneval_plus", "bigcodebench_full", "bigcodebench_hard", "livecodebench"} <= set(
        gen["benchmarks"]
    )


def test_project_protocol_restores_the_earlier_choices(repo_root):
    cfg = load_config(repo_root / "config" / "paper.yaml", check_files=False)
    raw = copy.deepcopy(cfg)
    raw["evaluate"]["codegen"]["protocol"] = "project"
    gen = validate_config(raw)["evaluate"]["codegen"]
    assert (gen["temperature"], gen["ks"], gen["livecodebench"]["start_date"]) == (0.8, [1, 5], "2025-02-01")
    assert gen["livecodebench"]["end_date"] is None


def test_default_config_keeps_its_own_keys(repo_root):
    gen = load_config(repo_root / "config.yaml")["evaluate"]["codegen"]
    assert gen["protocol"] == "custom" and gen["temperature"] == 0.8 and gen["n_samples"] == 2


def test_named_protocol_replaces_the_keys_and_checks_benchmarks():
    cfg = {
        "evaluate": {
            "codegen": {
                "protocol": "verpo",
                "temperature": 0.2,
                "ks": [1, 10],
                "benchmarks": ["humaneval"],
                "livecodebench": {"start_date": "2025-01-01"},
            }
        }
    }
    with pytest.raises(ValueError, match=r"lacks \['humaneval_plus', 'bigcodebench_full'"):
        apply_codegen_protocol(cfg)
    cfg["evaluate"]["codegen"]["benchmarks"] = CODEGEN_PROTOCOLS["verpo"]["requires"]
    gen = apply_codegen_protocol(cfg)["evaluate"]["codegen"]
    assert (gen["temperature"], gen["ks"], gen["livecodebench"]["start_date"]) == (0.6, [1], "2023-05-01")
    with pytest.raises(ValueError, match="unknown protocol"):
        apply_codegen_protocol({"evaluate": {"codegen": {"protocol": "nope"}}})


def test_config_error_names_the_file(repo_root, tmp_path):
    import yaml

    raw = yaml.safe_load((repo_root / "config.yaml").read_text())
    raw["evaluate"]["codegen"]["protocol"] = "verpo"
    raw["evaluate"]["codegen"]["benchmarks"] = ["humaneval"]
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"c\.yaml: evaluate.codegen.protocol verpo"):
        load_config(p, check_files=False)


def _result(bench, system="dhrcl-full-seed0", protocol="verpo", window=None):
    r = {
        "kind": "codegen",
        "benchmark": bench,
        "system": system,
        "label": system,
        "variant": "full",
        "reconstructed": True,
        "pass@k": {"1": 50.0},
        "syntax_acc": 90.0,
        "exec_acc": 80.0,
        "sampling": {"n": 10, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 2048},
        "provenance": {"config": {"protocol": protocol, "ks": [1]}, "date": "2026-12-04", "config_hash": "x"},
        "_path": f"results/eval/{system}/{bench}.json",
    }
    if window:
        r["date_window"] = window
    return r


def test_table_notes_print_every_protocol_value():
    results = [
        _result("humaneval"),
        _result("bigcodebench_full"),
        _result("bigcodebench_hard"),
        _result("livecodebench", window=["2023-05-01", "2025-04-30"]),
    ]
    notes = protocol_notes(results)
    assert notes == [describe("verpo", results[0]["sampling"], [1], ["2023-05-01", "2025-04-30"], ["full", "hard"])]
    note = notes[0]
    for text in (
        "protocol 'verpo'",
        "temperature 0.6",
        "top_p 0.95",
        "10 samples per problem",
        "pass@1 by the unbiased estimator",
        "LiveCodeBench contest dates 2023-05-01 to 2025-04-30",
        "BigCodeBench splits full, hard",
        "max 2048 new tokens",
        "reconstructed: top_p, n_samples",
    ):
        assert text in note, text
    # a result of another protocol gets its own note
    other = _result("humaneval", system="dhrcl-full-seed1", protocol="project")
    other["sampling"] = {**other["sampling"], "temperature": 0.8}
    assert len(protocol_notes(results + [other])) == 2


def test_dhrcl_table_carries_the_protocol_note():
    t = table_dhrcl([_result("humaneval")], {}, benchmarks=("humaneval",))
    assert any(n.startswith("Code-generation protocol 'verpo': temperature 0.6") for n in t.notes)

"""The datasets / data config sections: defaults, and readable errors for bad values."""

from __future__ import annotations

import copy

import pytest
import yaml

from codegrpo.config import ConfigError, load_config, validate_config


def _base(repo_root):
    with open(repo_root / "config.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def test_shipped_configs_validate(repo_root):
    for path in ("config.yaml", "config/paper.yaml"):
        cfg = load_config(repo_root / path)
        assert set(cfg["datasets"]) == {"sk2d_rl_examples", "pseudo2norm_examples", "norm2code_examples"}
        assert cfg["data"]["normalize"]["clang_format_style"].startswith("{BasedOnStyle: Google")


def test_defaults_filled(repo_root):
    cfg = {"device": "cpu", "datasets": {"mine": {"path": "x.jsonl", "shape": "raw", "stage": "skin"}}}
    validate_config(cfg)
    mine = cfg["datasets"]["mine"]
    assert mine["roles"] == ["rl", "sft"] and mine["normalize"] is False and mine["check_headers"] is True
    assert mine["fields"] == {"input": "input", "target": "output", "header": None, "id": None}
    assert mine["unwrap"] is None
    assert cfg["data"]["val_fraction"] == 0.1 and cfg["data"]["headers"]["gcc_timeout"] == 10.0
    assert cfg["data"]["kodcode"]["heldout_fraction"] == 0.1
    assert cfg["data"]["data_source_aliases"] == {"llm4decompile_exe": "sk2decompile_structure"}
    no_datasets = {"device": "cpu"}
    validate_config(no_datasets)
    assert set(no_datasets["datasets"]) == {"sk2d_rl_examples", "pseudo2norm_examples", "norm2code_examples"}


@pytest.mark.parametrize(
    "mutate, where, words",
    [
        (
            lambda c: c["datasets"]["sk2d_rl_examples"].update(shape="csv"),
            "datasets/sk2d_rl_examples/shape",
            "'csv' is not one of",
        ),
        (
            lambda c: c["datasets"]["sk2d_rl_examples"].pop("path"),
            "datasets/sk2d_rl_examples",
            "'path' is a required property",
        ),
        (
            lambda c: c["datasets"]["sk2d_rl_examples"].update(sttage="skin"),
            "datasets/sk2d_rl_examples",
            "'sttage' was unexpected",
        ),
        (
            lambda c: c["datasets"].update(rl=copy.deepcopy(c["datasets"]["sk2d_rl_examples"])),
            "datasets",
            "'rl' does not match",
        ),
        (
            lambda c: c["datasets"]["norm2code_examples"].update(roles=["rl", "dpo"]),
            "datasets/norm2code_examples/roles/1",
            "'dpo' is not one of",
        ),
        (
            lambda c: c["data"].update(val_fraction=1.5),
            "data/val_fraction",
            "1.5 is greater than or equal to the maximum of 1",
        ),
        (
            lambda c: c["data"]["headers"].update(gcc_timeout=0),
            "data/headers/gcc_timeout",
            "less than or equal to the minimum of 0",
        ),
        (lambda c: c["data"]["normalize"].update(timeout=1), "data/normalize", "'timeout' was unexpected"),
        (lambda c: c["data"]["kodcode"].update(paths=[]), "data/kodcode/paths", "should be non-empty"),
        (lambda c: c.update(on_bad_record="skip"), "on_bad_record", "'skip' is not one of"),
        (lambda c: c["data"].update(sk2d_inputs="both"), "data/sk2d_inputs", "'both' is not one of"),
        (lambda c: c["data"].update(generate={"dedup": "source"}), "data/generate/dedup", "'source' is not one of"),
        (
            lambda c: c["data"].update(sk2d_inputs="generated", generate={"source": {"path": "nope.parquet"}}),
            "data/generate/source/path",
            "file not found",
        ),
        (
            lambda c: c["data"]["kodcode"].update(source={"path": "nope.parquet"}),
            "data/kodcode/source/path",
            "file not found",
        ),
        (
            lambda c: c["data"]["kodcode"].update(gpt_difficulty=["trivial"]),
            "data/kodcode/gpt_difficulty/0",
            "'trivial' is not one of",
        ),
        (
            lambda c: c.update(datasets={"generated": c["datasets"]["sk2d_rl_examples"]}),
            "datasets",
            "'generated' does not match",
        ),
    ],
)
def test_bad_config_readable(repo_root, tmp_path, mutate, where, words):
    cfg = _base(repo_root)
    mutate(cfg)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert f"{path}: {where}: " in msg, msg
    assert words in msg, msg

"""Bad config files: every kind is refused with a message naming the file (or the key path), through
``codegrpo.config.load_config`` and through ``snakemake -n --configfile``, and nothing is written.

``tests/test_config.py`` covers the datasets/data sections value by value; this suite covers the kinds of
breakage a hand-edited config meets across the whole file (types, unknown keys at every depth, enums, negative
numbers, required keys, missing input files, text that is not YAML, empty files, duplicate keys...).
"""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from codegrpo.config import ConfigError, load_config

pytestmark = pytest.mark.hostile


def _ds(**kw):
    base = {"path": "data/sk2decompile/norm2code-examples.jsonl", "shape": "raw", "stage": "skin"}
    base.update(kw)
    return base


# (id, YAML text, key path as load_config names it ("" = top level), words in the load_config message,
#  snakemake: None = not checked through snakemake, else words that must appear in its output)
CASES = [
    (
        "wrong_type_number",
        {"data": {"val_fraction": "abc"}},
        "data/val_fraction",
        "'abc' is not of type 'number'",
        ["['data']['val_fraction']", "'abc' is not of type 'number'"],
    ),
    (
        "wrong_type_bool",
        {"sft": {"gradient_checkpointing": "yes"}},
        "sft/gradient_checkpointing",
        "'yes' is not of type 'boolean'",
        ["['sft']['gradient_checkpointing']"],
    ),
    ("wrong_type_section", {"sandbox": 5}, "sandbox", "5 is not of type 'object'", ["['sandbox']"]),
    (
        "wrong_type_list",
        {"sft": {"logger": "console"}},
        "sft/logger",
        "'console' is not of type 'array'",
        ["['sft']['logger']"],
    ),
    (
        "unknown_key_top",
        {"trainer": {"lr": 1e-6}},
        "(top level)",
        "'trainer' was unexpected",
        ["'trainer' was unexpected"],
    ),
    (
        "unknown_key_section",
        {"embedding": {"backnd": "local"}},
        "embedding",
        "'backnd' was unexpected",
        ["['embedding']", "'backnd' was unexpected"],
    ),
    (
        "unknown_key_deep",
        {"dhrcl": {"reward": {"static_weights": {"passs": 1.0}}}},
        "dhrcl/reward/static_weights",
        "'passs' was unexpected",
        ["['dhrcl']['reward']['static_weights']", "'passs' was unexpected"],
    ),
    (
        "unknown_key_dataset_fields",
        {"datasets": {"mine": _ds(fields={"inptu": "x"})}},
        "datasets/mine/fields",
        "'inptu' was unexpected",
        ["['datasets']['mine']['fields']", "'inptu' was unexpected"],
    ),
    ("bad_enum_device", {"device": "tpu"}, "device", "'tpu' is not one of ['cpu', 'gpu']", ["'tpu' is not one of"]),
    (
        "bad_enum_nested",
        {"compile_reward": {"mode": "turbo"}},
        "compile_reward/mode",
        "'turbo' is not one of",
        ["['compile_reward']['mode']", "'turbo' is not one of"],
    ),
    ("negative_seed", {"seed": -5}, "seed", "-5 is less than the minimum of 0", ["['seed']", "-5 is less than"]),
    (
        "negative_memory",
        {"sandbox": {"memory_mb": -1}},
        "sandbox/memory_mb",
        "-1 is less than the minimum of 64",
        ["['sandbox']['memory_mb']"],
    ),
    (
        "zero_timeout",
        {"embedding": {"timeout_s": 0}},
        "embedding/timeout_s",
        "0 is less than or equal to the minimum of 0",
        ["['embedding']['timeout_s']"],
    ),
    (
        "port_out_of_range",
        {"cluster": {"ray_port": 70000}},
        "cluster/ray_port",
        "70000 is greater than the maximum",
        ["['cluster']['ray_port']"],
    ),
    (
        "dataset_missing_required",
        {"datasets": {"mine": {"path": "x.jsonl", "shape": "raw"}}},
        "datasets/mine",
        "'stage' is a required property",
        ["['datasets']['mine']", "'stage' is a required property"],
    ),
    (
        "dataset_bad_shape",
        {"datasets": {"mine": _ds(shape="parquet")}},
        "datasets/mine/shape",
        "'parquet' is not one of ['verl', 'raw']",
        ["['datasets']['mine']['shape']"],
    ),
    (
        "dataset_not_a_mapping",
        {"datasets": {"mine": ["data/x.jsonl"]}},
        "datasets/mine",
        "is not of type 'object'",
        ["['datasets']['mine']"],
    ),
    (
        "dataset_reserved_name",
        {"datasets": {"kodcode": _ds()}},
        "datasets",
        "'kodcode' does not match",
        ["'kodcode' does not match"],
    ),
    (
        "dataset_missing_file",
        {"datasets": {"mine": _ds(path="data/no/such/file.jsonl")}},
        "datasets/mine/path",
        "file not found",
        ["datasets/mine/path", "file not found", "data/no/such/file.jsonl"],
    ),
    (
        "dataset_path_is_dir",
        {"datasets": {"mine": _ds(path="data")}},
        "datasets/mine/path",
        "not a regular file",
        ["datasets/mine/path", "not a regular file"],
    ),
    (
        "kodcode_missing_file",
        {"data": {"kodcode": {"paths": ["data/kodcode/missing.json"]}}},
        "data/kodcode/paths/0",
        "file not found",
        ["data/kodcode/paths/0", "file not found"],
    ),
]
# One case of each kind also goes through `snakemake -n` (each run costs a workflow parse).
SNAKEMAKE_CASES = [
    c
    for c in CASES
    if c[0]
    in {
        "wrong_type_number",
        "wrong_type_section",
        "unknown_key_top",
        "unknown_key_deep",
        "bad_enum_nested",
        "negative_memory",
        "dataset_missing_required",
        "dataset_bad_shape",
        "dataset_missing_file",
        "kodcode_missing_file",
    }
]


def _write(tmp_path, body, name="bad.yaml"):
    path = tmp_path / name
    cfg = dict(body)
    if "results_dir" not in cfg:  # where a run would write: it must stay absent
        cfg["results_dir"] = str(tmp_path / "results")
        cfg["logs_dir"] = str(tmp_path / "logs")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _full(repo_root, body):
    """The shipped config.yaml with ``body`` merged in (what load_config sees for a hand-edited file)."""
    with open(repo_root / "config.yaml", encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)

    def merge(dst, src):
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = v

    merge(cfg, body)
    return cfg


def _no_output(tmp_path):
    assert not (tmp_path / "results").exists(), sorted(os.listdir(tmp_path / "results"))
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_load_config_names_the_key_path(case, repo_root, tmp_path, monkeypatch):
    _, body, where, words, _ = case
    monkeypatch.chdir(tmp_path)  # relative input paths are resolved from the workflow directory, not the cwd
    path = _write(tmp_path, _full(repo_root, body))
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    msg = str(ei.value)
    assert f"{path}: {where}: " in msg, msg
    assert words in msg, msg
    _no_output(tmp_path)


def test_shipped_configs_still_load(repo_root):
    """The strict loader (duplicate keys, merges) and the file check accept the shipped configs."""
    for name in ("config.yaml", "config/paper.yaml"):
        cfg = load_config(repo_root / name)
        with open(repo_root / name, encoding="utf-8") as fh:
            plain = yaml.safe_load(fh)
        from codegrpo.config import validate_config

        assert cfg == validate_config(plain, name)


def test_missing_file_check_can_be_skipped(repo_root, tmp_path):
    path = _write(tmp_path, _full(repo_root, {"datasets": {"mine": _ds(path="nowhere.jsonl")}}))
    cfg = load_config(path, check_files=False)
    assert cfg["datasets"]["mine"]["path"] == "nowhere.jsonl"


# ------------------------------------------------------------------------------------------- not a YAML mapping
FILE_CASES = [
    ("binary", b"PAR1\x00\x15\x04\x15\xff\xfe\x00\x00", "not a YAML config (not UTF-8 text"),
    ("yaml_syntax", b"data:\n  val_fraction: [0.1\nseed: 1\n", "not valid YAML"),
    ("tab_indent", b"data:\n\tval_fraction: 0.1\n", "not valid YAML"),
    ("empty", b"", "the config file is empty"),
    ("only_comments", b"# nothing here\n\n", "the config file is empty"),
    ("top_level_list", b"- device: cpu\n", "the top level must be a mapping, got list"),
    ("top_level_scalar", b"cpu\n", "the top level must be a mapping, got str"),
    (
        "duplicate_key",
        b"device: cpu\nseed: 1\ndata:\n  val_fraction: 0.1\n  val_fraction: 0.2\n",
        "line 5: key 'val_fraction' is given twice in the same mapping (first on line 4)",
    ),
]


@pytest.mark.parametrize("name, data, words", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_unreadable_config_files(name, data, words, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    msg = str(ei.value)
    assert msg.startswith(f"{path}: "), msg
    assert words in msg, msg


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_config(tmp_path / "nope.yaml")
    assert f"{tmp_path / 'nope.yaml'}: cannot read the config file" in str(ei.value)
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path)  # a directory


# ------------------------------------------------------------------------------------------- through snakemake
UNREADABLE = [
    # Snakemake reads --configfile itself: a non-UTF-8 file ends in its UnicodeDecodeError traceback, and its
    # messages do not name the file (load_config's do, see test_unreadable_config_files).
    ("binary", b"PAR1\x00\x15\x04\x15\xff\xfe\x00\x00", ("not valid JSON or YAML", "UnicodeDecodeError")),
    ("yaml_syntax", b"data:\n  val_fraction: [0.1\nseed: 1\n", ("not valid JSON or YAML",)),
    ("empty", b"", ("keys at top level",)),
]


@pytest.fixture(scope="module")
def snakemake_runs(snakemake_bin, repo_root, tmp_path_factory):
    """Every Snakemake invocation of this suite, run concurrently (each is a workflow start-up that mostly
    waits): name -> (completed process, its folder)."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = {}
    for name, body, *_ in SNAKEMAKE_CASES:
        d = tmp_path_factory.mktemp(name)
        jobs[name] = (d, ["-n", "--configfile", str(_write(d, body))])
    for name, data, _ in UNREADABLE:
        d = tmp_path_factory.mktemp(name)
        (d / "bad.yaml").write_bytes(data)
        jobs["unreadable_" + name] = (d, ["-n", "--configfile", str(d / "bad.yaml")])
    d = tmp_path_factory.mktemp("real_run")
    path = _write(d, {"datasets": {"mine": _ds(path=str(d / "gone.jsonl"), roles=["rl"])}})
    jobs["real_run"] = (d, ["data", "--cores", "1", "--configfile", str(path)])  # not a dry run

    def run(args):
        return subprocess.run([snakemake_bin, *args], cwd=repo_root, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=7) as pool:
        futures = {name: pool.submit(run, args) for name, (_, args) in jobs.items()}
        return {name: (fut.result(), jobs[name][0]) for name, fut in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("case", SNAKEMAKE_CASES, ids=[c[0] for c in SNAKEMAKE_CASES])
def test_snakemake_dry_run_names_the_key_path(case, snakemake_runs):
    name, _, _, _, words = case
    proc, folder = snakemake_runs[name]  # --configfile extends config.yaml, as a user's override file does
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    for w in words:
        assert w in out, (w, out[-3000:])
    _no_output(folder)


@pytest.mark.slow
@pytest.mark.parametrize("name, data, words", UNREADABLE, ids=[c[0] for c in UNREADABLE])
def test_snakemake_refuses_unreadable_configfile(name, data, words, snakemake_runs):
    proc, _ = snakemake_runs["unreadable_" + name]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert any(w in out for w in words), out[-3000:]
    assert "Building DAG" not in out


@pytest.mark.slow
def test_snakemake_real_run_with_missing_dataset_writes_nothing(snakemake_runs):
    """Not a dry run: the missing file stops the workflow at parse time, before any job writes anything."""
    proc, folder = snakemake_runs["real_run"]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "datasets/mine/path: file not found" in out and str(folder / "gone.jsonl") in out, out[-3000:]
    _no_output(folder)

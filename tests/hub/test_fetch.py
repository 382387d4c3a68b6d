"""codegrpo.hub.fetch: the prefetch, run for real against a loopback stand-in of the Hugging Face Hub
(tests/hub_standin.py) through huggingface_hub's own download code (HF_ENDPOINT), then used offline the way a job
uses it; files by URL; what an offline job would miss."""

from __future__ import annotations

import copy
import functools
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from codegrpo import hub, preflight
from tests.hub_standin import COMMIT, HubStandIn

from tests.conftest import REPO_ROOT as REPO, copy_workflow, run_snakemake

MODEL_ID = "codegrpo-test/tiny-qwen2"
DATASET_ID = "codegrpo-test/TinyRows-10K"  # datasets snake-cases the cache folder: tiny_rows-10_k
LCB_ID = "codegrpo-test/lcb-lite"
KOD_ID = "codegrpo-test/KodRows"


def _python(code: str, *args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS`` in the repository with ``env``, output captured."""
    cmd = [sys.executable, "-c", code, *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout, env=env)


def test_prefetch_refuses_to_run_offline(tmp_path):
    code = (
        "from codegrpo import hub\n"
        "try:\n    hub.download({'models': [('model.base', 'a/b')]}, 'h', 'h/hub', 'h/datasets')\n"
        "except hub.HubError as e:\n    print('ERR', e)\n"
    )
    proc = _python(code, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}, timeout=120)
    assert "ERR prefetch needs the network, but HF_HUB_OFFLINE is set" in proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    from codegrpo.models import build_tiny_model

    out = tmp_path_factory.mktemp("hubmodel") / "tiny"
    corpus = ["int func0(int var1) { return var1 + 1; }", "for (int i = 0; i < n; i++) sum += a[i];"] * 20
    build_tiny_model(out, corpus, arch="qwen2", vocab_size=400, seed=0)
    return out


def _online_env(endpoint: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in hub.OFFLINE_VARS and not k.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, PYTHONPATH=str(REPO), HF_HUB_DISABLE_TELEMETRY="1")
    return env


def test_prefetch_through_a_hub_standin_then_offline(paper, tiny_model_dir, tmp_path):
    home = tmp_path / "hf"
    cfg = copy.deepcopy(paper)
    cfg["model"]["base"] = MODEL_ID
    cfg["dhrcl"]["init"] = "base"
    cfg["dhrcl"]["models"] = []  # one model: dhrcl.init
    cfg["dhrcl"]["reward_model"]["model"] = None  # no AceCodeRM in this stand-in hub
    cfg["embedding"]["serve"] = False
    cfg["hub"] = {"cache_dir": str(home), "offline_jobs": True, "models": [], "datasets": [DATASET_ID]}
    # a data source with its own datasets cache (as data.kodcode.source has on the paper config), and
    # LiveCodeBench-style dataset files; nothing else from the hub
    kod_cache = tmp_path / "kod-cache"
    cfg["data"]["sk2d_inputs"] = "examples"
    cfg["data"]["kodcode"]["source"] = {
        "hub_id": KOD_ID,
        "path": None,
        "split": "train",
        "cache_dir": str(kod_cache),
        "limit": None,
    }
    cfg["evaluate"]["codegen"]["benchmarks"] = ["humaneval", "livecodebench"]
    cfg["evaluate"]["codegen"]["livecodebench"] = {
        **cfg["evaluate"]["codegen"]["livecodebench"],
        "source": LCB_ID,
        "version": "v2",
    }
    rows_repo = tmp_path / "rows"
    (rows_repo / "data").mkdir(parents=True)
    (rows_repo / "data" / "train.jsonl").write_text(
        "".join(json.dumps({"id": i, "code": f"int f{i};"}) + "\n" for i in range(5))
    )
    lcb_repo = tmp_path / "lcb"
    lcb_repo.mkdir()
    for name in ("test.jsonl", "test2.jsonl"):
        (lcb_repo / name).write_text(json.dumps({"question_title": name}) + "\n")
    # a file the config names by URL (the MBPP-Decompile evaluation file), served on loopback
    served = REPO / "data" / "sk2decompile" / "mbpp-decompile-sample.json"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served.parent))
    files_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=files_server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{files_server.server_address[1]}/{served.name}"
    cfg["evaluate"]["decompile"]["mbpp"]["data"] = url
    cfg["evaluate"]["decompile"]["data"] = str(
        REPO / "data" / "sk2decompile" / "humaneval-decompile-v1-gcc-ghidra.json"
    )
    offline = {"HF_HUB_OFFLINE": "1"}
    # before: the offline check names the keys and the fix
    problems = preflight.check_offline(cfg, offline)
    assert [p.split(" = ")[0] for p in problems] == [
        "model.base",
        "hub.datasets[0]",
        "data.kodcode.source.hub_id",
        "evaluate.codegen.livecodebench.source",
        "evaluate.decompile.mbpp.data",
    ]
    assert problems[1].startswith(f"hub.datasets[0] = '{DATASET_ID}' (dataset)")
    assert f"({kod_cache})" in problems[2] and "['test2.jsonl']" in problems[3]
    assert all("snakemake prefetch" in p for p in problems)

    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(json.dumps(cfg))
    code = (
        "import json, sys\nfrom codegrpo import hub\n"
        "print('MANIFEST ' + json.dumps(hub.prefetch(json.load(open(sys.argv[1])))))\n"
    )
    with HubStandIn(
        models={MODEL_ID: tiny_model_dir}, datasets={DATASET_ID: rows_repo, KOD_ID: rows_repo, LCB_ID: lcb_repo}
    ) as standin:
        proc = _python(code, str(cfg_file), env={**_online_env(standin.url), "HF_HOME": str(home)})
        assert proc.returncode == 0, proc.stderr[-3000:]
        requests = list(standin.requests)
    files_server.shutdown()
    files_server.server_close()
    manifest = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("MANIFEST "))[9:])
    (entry,) = manifest["models"]
    assert entry["id"] == MODEL_ID and entry["revision"] == COMMIT
    expected = sorted(str(p.relative_to(tiny_model_dir)) for p in tiny_model_dir.rglob("*") if p.is_file())
    assert entry["files"] == expected
    assert ("GET", f"/api/models/{MODEL_ID}") in requests or (
        "GET",
        f"/api/models/{MODEL_ID}/revision/main",
    ) in requests
    assert ("GET", f"/{MODEL_ID}/resolve/{COMMIT}/config.json") in requests
    assert [(d["key"], d["id"], d["cache_dir"], d["splits"]) for d in manifest["datasets"]] == [
        ("hub.datasets[0]", DATASET_ID, str(home / "datasets"), {"train": 5}),
        ("data.kodcode.source.hub_id", KOD_ID, str(kod_cache), {"train": 5}),
    ]
    assert ("GET", f"/datasets/{DATASET_ID}/resolve/{COMMIT}/data/train.jsonl") in requests
    (files,) = manifest["dataset_repos"]
    assert files["id"] == LCB_ID and files["files"] == ["test2.jsonl"]  # only what the version reads
    assert not any(p.endswith("/test.jsonl") for _, p in requests)
    (fetched,) = manifest["urls"]
    assert fetched["key"] == "evaluate.decompile.mbpp.data" and fetched["url"] == url
    assert fetched["sha256"] == hashlib.sha256(served.read_bytes()).hexdigest()
    assert Path(fetched["path"]).parent == home / "codegrpo-urls"
    snapshot = home / "hub" / ("models--" + MODEL_ID.replace("/", "--")) / "snapshots" / COMMIT
    assert (snapshot / "config.json").read_bytes() == (tiny_model_dir / "config.json").read_bytes()

    # after: the preflight's offline check passes with the cache, and a job loads the model by id, offline,
    # with the hub unreachable (the stand-in is gone)
    assert preflight.check_offline(cfg, offline) == []
    job_env = {**_online_env("http://127.0.0.1:9"), **hub.job_env(cfg, {})}
    imported = tmp_path / "imported"
    load = (
        "from codegrpo.models import import_checkpoint\n"
        f"import_checkpoint({MODEL_ID!r}, {str(imported)!r})\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"tok = AutoTokenizer.from_pretrained({MODEL_ID!r}); m = AutoModelForCausalLM.from_pretrained({MODEL_ID!r})\n"
        "print('LOADED', type(m).__name__, len(tok('int x;')['input_ids']) > 0)\n"
    )
    proc = _python(load, env=job_env)
    assert "LOADED Qwen2ForCausalLM True" in proc.stdout, proc.stderr[-3000:]
    # a stage's `import` of a hub id (codegrpo.models.import_checkpoint) also works offline from the cache
    assert (imported / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
    rows = (
        "import datasets\n"
        f"ds = datasets.load_dataset({DATASET_ID!r}, split='train')\n"
        "print('ROWS', len(ds), ds[4]['code'])\n"
    )
    proc = _python(rows, env=job_env)
    assert "ROWS 5 int f4;" in proc.stdout, proc.stderr[-3000:]
    # the data and evaluation code paths, offline: the KodCode release from its own cache, LiveCodeBench's file
    jobs = (
        "from codegrpo.data.kodcode import load_release\n"
        "from codegrpo.eval.suites.livecodebench import _lcb_paths\n"
        f"name, rows = load_release({cfg['data']['kodcode']['source']!r})\n"
        f"(path,) = _lcb_paths({LCB_ID!r}, 'v2')\n"
        "print('JOBS', name, len(rows), open(path).read().strip())\n"
    )
    proc = _python(jobs, env=job_env)
    assert f'JOBS {KOD_ID} 5 {{"question_title": "test2.jsonl"}}' in proc.stdout, proc.stderr[-3000:]
    # the evaluation's file by URL, offline, from the URL cache (its server is gone); a URL never prefetched fails
    # naming the prefetch instead of trying the network
    urls = (
        "from codegrpo.eval.decompile import EvalDataError, fetch_eval_file\n"
        f"print('URL', open(fetch_eval_file({url!r}), 'rb').read() == open({str(served)!r}, 'rb').read())\n"
        "try:\n"
        f"    fetch_eval_file({url + '.other'!r})\n"
        "except EvalDataError as exc:\n"
        "    print('OFFLINE', 'snakemake prefetch' in str(exc))\n"
    )
    proc = _python(urls, env=job_env)
    assert "URL True" in proc.stdout and "OFFLINE True" in proc.stdout, proc.stderr[-3000:]


def test_prefetch_failure_names_the_key(paper, tmp_path):
    cfg = copy.deepcopy(paper)
    cfg["hub"] = {"cache_dir": str(tmp_path / "hf"), "offline_jobs": True}
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(json.dumps(cfg))
    code = (
        "import json, sys\nfrom codegrpo import hub\n"
        "try:\n    hub.prefetch(json.load(open(sys.argv[1])))\n"
        "except hub.HubError as e:\n    print('ERR', e)\n"
    )
    with HubStandIn(models={}) as standin:  # the hub answers, but has none of the repos
        proc = _python(code, str(cfg_file), env=_online_env(standin.url))
    assert "ERR model.base = 'LLM4Binary/llm4decompile-6.7b-v2': download failed" in proc.stdout, proc.stderr[-2000:]


def test_prefetch_rule_goes_online_while_the_workflow_sets_jobs_offline(tiny_model_dir, tmp_path):
    """`snakemake prefetch` (the rule and its script) with hub.offline_jobs: the Snakemake process exports the
    offline switches for every job, and the prefetch rule alone still downloads, into hub.cache_dir."""
    wd = copy_workflow(tmp_path / "wf", symlinks=False)
    home = tmp_path / "hf"
    (wd / "site.yaml").write_text(
        yaml.safe_dump({"hub": {"cache_dir": str(home), "offline_jobs": True, "models": [MODEL_ID]}})
    )
    with HubStandIn(models={MODEL_ID: tiny_model_dir}) as standin:
        env = {**_online_env(standin.url), "PYTHONPATH": str(REPO)}
        args = ("prefetch", "--cores", "1", "--configfile", "config.yaml", "site.yaml")
        proc = run_snakemake(*args, cwd=wd, timeout=600, lock=True, env=env)
    log = wd / "logs" / "prefetch" / "prefetch.log"
    assert proc.returncode == 0, proc.stderr[-3000:] + (log.read_text() if log.exists() else "")
    manifest = json.loads((wd / "results" / "hub" / "prefetch.json").read_text())
    assert manifest["hf_home"] == str(home) and [m["id"] for m in manifest["models"]] == [MODEL_ID]
    assert hub.model_cached(MODEL_ID, home / "hub")
    assert "prefetch: 1 model(s), 0 dataset(s)" in log.read_text()


def test_a_real_run_with_offline_jobs_stops_on_uncached_models(tmp_path):
    """Outside SLURM too, a real run (not a dry run) with hub.offline_jobs checks the cache before any job."""
    site = tmp_path / "site.yaml"
    site.write_text(
        yaml.safe_dump(
            {
                "hub": {"cache_dir": str(tmp_path / "empty"), "offline_jobs": True},
                "results_dir": str(tmp_path / "res"),
                "logs_dir": str(tmp_path / "logs"),
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    configs = ("--configfile", "config.yaml", "config/paper.yaml", str(site))
    proc = run_snakemake("--cores", "1", *configs, timeout=300, lock=True, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "PreflightError" in out
    assert (
        f"model.base = 'LLM4Binary/llm4decompile-6.7b-v2' is neither a local path nor in the Hugging Face "
        f"cache ({tmp_path / 'empty' / 'hub'})" in out
    )
    assert not (tmp_path / "res").exists()  # no job ran
    dry = run_snakemake("-n", *configs, timeout=300, lock=True, env=env)
    assert dry.returncode == 0, dry.stderr[-2000:]  # planning needs no cache

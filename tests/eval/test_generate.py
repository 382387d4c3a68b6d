"""The vLLM evaluation path against a fake ``vllm`` package that records every call.

The fake has vLLM 0.8.5's interface as the code uses it (``LLM(**engine_args)``, ``get_tokenizer()``,
``generate(prompts, SamplingParams, use_tqdm)``, ``vllm.distributed.parallel_state.destroy_*``). Its engine
counts as alive from construction until ``destroy_model_parallel`` tears it down, and it records an overlap if a
second engine is built while one is alive: what happens on a real 1-GPU job when the second engine finds no
memory for its KV cache. The tokenizer is the real one of a tiny model.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from codegrpo.eval import decompile as d
from codegrpo.eval.generate import GenerationSettings, HFGenerator, VLLMGenerator, make_generator

GHIDRA = "data/sk2decompile/humaneval-decompile-v1-gcc-ghidra.json"

FAKE_VLLM = """
import types
from transformers import AutoTokenizer

EVENTS = []   # ("engine", args) / ("generate", model, prompts, params) / ("destroy",)
ALIVE = []    # models of engines not torn down yet
OVERLAPS = []


class SamplingParams:
    def __init__(self, **kw):
        self.kw = kw


class LLM:
    def __init__(self, **kw):
        if ALIVE:
            OVERLAPS.append((list(ALIVE), kw["model"]))
        ALIVE.append(kw["model"])
        EVENTS.append(("engine", kw))
        self.kw = kw
        self._tok = AutoTokenizer.from_pretrained(kw["model"])

    def get_tokenizer(self):
        return self._tok

    def generate(self, prompts, params, use_tqdm=True):
        EVENTS.append(("generate", self.kw["model"], prompts, params.kw))
        for p in prompts:
            ids = p["prompt_token_ids"]
            if len(ids) + params.kw["max_tokens"] > self.kw["max_model_len"]:
                raise ValueError(f"prompt of {len(ids)} tokens longer than max_model_len")
        out = lambda: types.SimpleNamespace(text="int func0(int a) { return a; }")
        return [types.SimpleNamespace(outputs=[out() for _ in range(params.kw["n"])]) for _ in prompts]
"""

FAKE_PARALLEL_STATE = """
from vllm import ALIVE, EVENTS


def destroy_model_parallel():
    EVENTS.append(("destroy",))
    ALIVE.clear()


def destroy_distributed_environment():
    EVENTS.append(("destroy_dist",))
"""


@pytest.fixture()
def fake_vllm(tmp_path, monkeypatch):
    pkg = tmp_path / "fakes" / "vllm"
    (pkg / "distributed").mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(FAKE_VLLM))
    (pkg / "distributed" / "__init__.py").write_text("")
    (pkg / "distributed" / "parallel_state.py").write_text(textwrap.dedent(FAKE_PARALLEL_STATE))
    monkeypatch.syspath_prepend(str(tmp_path / "fakes"))
    for name in ("vllm", "vllm.distributed", "vllm.distributed.parallel_state"):
        monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    import vllm

    return vllm


@pytest.fixture(scope="module")
def tiny(repo_root, tmp_path_factory):
    from codegrpo.models import build_tiny_model

    data = json.loads((repo_root / GHIDRA).read_text())[:30]
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", [x["c_func"] for x in data], vocab_size=330, num_layers=1
    )


def test_engine_args_come_from_the_settings(fake_vllm, tiny):
    engine = {"gpu_memory_utilization": 0.42, "max_model_len": 300, "tensor_parallel_size": 2, "seed": 5}
    s = GenerationSettings(max_new_tokens=7, max_prompt_tokens=40, **engine)
    gen = make_generator(tiny, s, backend="vllm")
    assert isinstance(gen, VLLMGenerator)
    ((kind, args),) = fake_vllm.EVENTS
    assert kind == "engine" and args == {"model": str(tiny), **engine}  # the settings' values, as given
    gen.close()
    # max_model_len defaults to what the benchmark needs, and cannot be below it
    VLLMGenerator(tiny, GenerationSettings(max_new_tokens=7, max_prompt_tokens=40)).close()
    assert fake_vllm.EVENTS[-3][1]["max_model_len"] == 47
    with pytest.raises(ValueError, match=r"evaluate.vllm.max_model_len=30 is below evaluate.max_prompt_tokens"):
        VLLMGenerator(tiny, GenerationSettings(max_new_tokens=7, max_prompt_tokens=40, max_model_len=30))


def test_prompts_are_cut_like_the_transformers_backend(fake_vllm, tiny):
    s = GenerationSettings(max_new_tokens=4, max_prompt_tokens=16)
    long_prompt = d.skeleton_prompt("int f(int a) { return a + 1; }\n" * 20)
    gen = VLLMGenerator(tiny, s)
    gen.generate([long_prompt, "int"])
    sent = [p["prompt_token_ids"] for p in fake_vllm.EVENTS[-1][2]]
    hf = HFGenerator(tiny, s).tokenizer  # the transformers backend's tokenizer, as configured there
    want = [hf(t, truncation=True, max_length=16)["input_ids"] for t in (long_prompt, "int")]
    assert sent == want
    assert len(sent[0]) == 16 and len(hf(long_prompt)["input_ids"]) > 16
    assert sent[0][-5:] == hf(long_prompt)["input_ids"][-5:]  # the end (generation cue) survives


def test_two_phase_never_holds_two_engines(fake_vllm, repo_root, tiny, tmp_path):
    out = tmp_path / "sys.json"
    settings = GenerationSettings(
        max_new_tokens=8, max_prompt_tokens=64, use_chat_template=True, gpu_memory_utilization=0.8
    )
    res = d.run_system(
        "fake_vllm_sys",
        tiny,
        tiny,
        repo_root / GHIDRA,
        out,
        settings=settings,
        backend="vllm",
        tasks_per_level=1,
        workers=2,
    )
    kinds = [e[0] for e in fake_vllm.EVENTS]
    # skeleton engine, all skeleton outputs, teardown; then the skin engine, its outputs, teardown
    assert kinds == ["engine", "generate", "destroy", "destroy_dist", "engine", "generate", "destroy", "destroy_dist"]
    assert fake_vllm.OVERLAPS == [] and fake_vllm.ALIVE == []
    skeleton_prompts, skin_prompts = fake_vllm.EVENTS[1][2], fake_vllm.EVENTS[5][2]
    assert len(skeleton_prompts) == len(skin_prompts) == len(d.LEVELS)  # one batch per phase, every task
    saved = json.loads(out.read_text())
    assert saved["backend"] == "vllm" and res["reexec_avg"] >= 0


def test_overlap_is_detected_by_the_fake(fake_vllm, tiny):
    """The check above can fail: building engines eagerly (the old code) is caught."""
    a = VLLMGenerator(tiny, GenerationSettings())
    VLLMGenerator(tiny, GenerationSettings())
    assert fake_vllm.OVERLAPS == [([str(tiny)], str(tiny))]
    a.close()


def test_codegen_run_uses_one_engine_closed_before_scoring(fake_vllm, tiny, local, tmp_path, monkeypatch):
    """A run's evaluation (rule eval_codegen): one engine samples every benchmark, scored and BigCodeBench alike,
    and is torn down before the first sandbox scores."""
    from codegrpo.eval import codegen
    from codegrpo.eval.codegen_runs import run_model_benchmarks

    real_sandbox = codegen.make_sandbox
    alive_at_scoring = []

    def make_sandbox(*args, **kwargs):
        alive_at_scoring.append((len(fake_vllm.EVENTS), list(fake_vllm.ALIVE)))
        return real_sandbox(*args, **kwargs)

    monkeypatch.setattr(codegen, "make_sandbox", make_sandbox)
    suites = local["evaluate"]["codegen"]
    settings = GenerationSettings(max_new_tokens=8, max_prompt_tokens=128, n=2, temperature=0.8)
    results = {b: tmp_path / f"{b}.json" for b in ("humaneval", "livecodebench")}
    samples = {"bigcodebench_hard": tmp_path / "bigcodebench_hard.samples.json"}
    run_model_benchmarks(
        "fake", tiny, results, samples, settings=settings, backend="vllm", limit=2, ks=(1,), workers=2, suites=suites
    )
    kinds = [e[0] for e in fake_vllm.EVENTS]
    assert kinds == ["engine", "generate", "generate", "generate", "destroy", "destroy_dist"]
    assert fake_vllm.OVERLAPS == [] and fake_vllm.ALIVE == []
    # one generate call per benchmark, each with all of that benchmark's problems, at the configured sampling
    sizes = [len(e[2]) for e in fake_vllm.EVENTS if e[0] == "generate"]
    assert sizes == [len(codegen.load_benchmark(b, limit=2, suites=suites)) for b in [*results, *samples]]
    assert all(e[3]["n"] == 2 and e[3]["temperature"] == 0.8 for e in fake_vllm.EVENTS if e[0] == "generate")
    # both scored benchmarks were scored, each after the teardown (every event already recorded, no engine alive)
    assert alive_at_scoring == [(len(fake_vllm.EVENTS), [])] * 2
    for _b, path in results.items():
        saved = json.loads(path.read_text())
        assert saved["backend"] == "vllm" and saved["n_samples_per_problem"] == [2]
    saved = json.loads(samples["bigcodebench_hard"].read_text())
    assert saved["backend"] == "vllm" and all(len(v) == 2 for v in saved["samples"].values())


def test_generation_settings_from_rule_params():
    """The evaluation scripts build their settings from the rule's params; decompilation fixes greedy, one sample."""
    from types import SimpleNamespace

    from codegrpo.eval.generate import GenerationSettings

    # the params of the settings' own names, and the vllm section's
    same = dict(max_new_tokens=64, temperature=0.7, top_p=0.9, batch_size=3, max_prompt_tokens=900, seed=5)
    vllm = {"gpu_memory_utilization": 0.4, "max_model_len": 2048, "tensor_parallel_size": 2}
    p = SimpleNamespace(**same, n_samples=4, use_chat_template=True, vllm=vllm)
    s = GenerationSettings.from_params(p)
    assert {k: getattr(s, k) for k in (*same, *vllm)} == {**same, **vllm}
    assert (s.n, s.use_chat_template) == (4, True)
    g = GenerationSettings.from_params(p, temperature=0.0, n=1)
    assert (g.temperature, g.n, g.top_p, g.max_new_tokens) == (0.0, 1, 1.0, 64)

"""codegrpo.hub.refs: which hub ids and URLs a config loads (the paper config, imports, extras, local sources)."""

from __future__ import annotations

import copy

from codegrpo import hub


def test_refs_of_the_paper_config(paper, local):
    refs = hub.hub_refs(paper)
    # the DHRCL model sizes (dhrcl.models; dhrcl.init is unused while they are listed)
    assert refs["models"] == [
        ("model.base", "LLM4Binary/llm4decompile-6.7b-v2"),
        ("dhrcl.models[Qwen3-4B].init", "Qwen/Qwen3-4B"),
        ("dhrcl.models[Qwen3-8B].init", "Qwen/Qwen3-8B"),
        ("dhrcl.models[Qwen3-14B].init", "Qwen/Qwen3-14B"),
        ("dhrcl.reward_model.model", "TIGER-Lab/AceCodeRM-7B"),
        ("embedding.server_model_path", "Qwen/Qwen3-Embedding-0.6B"),
    ]
    # the generated SK2Decompile data's source and the KodCode release (each into its own cache_dir, as the data
    # jobs load them), the BigCodeBench sets, and LiveCodeBench's files of release_v6
    assert refs["datasets"] == [
        ("data.generate.source.hub_id", "LLM4Binary/decompile-ghidra-100k", "data/hf-cache"),
        ("data.kodcode.source.hub_id", "KodCode/KodCode-Light-RL-10K", "data/hf-cache"),
        ("evaluate.codegen.bigcodebench_full.source", "bigcode/bigcodebench", None),
        ("evaluate.codegen.bigcodebench_hard.source", "bigcode/bigcodebench-hard", None),
    ]
    assert refs["dataset_repos"] == [
        (
            "evaluate.codegen.livecodebench.source",
            "livecodebench/code_generation_lite",
            ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)],
        )
    ]
    # files by URL: the reference's HumanEval- and MBPP-Decompile files and the EvalPlus releases
    assert [(k, u.rsplit("/", 1)[-1]) for k, u in refs["urls"]] == [
        ("evaluate.decompile.data", "humaneval_normsrcpseudo.json"),
        ("evaluate.decompile.mbpp.data", "mbpp_normsrcpseudo.json"),
        ("evaluate.codegen.humaneval_plus.source", "HumanEvalPlus.jsonl.gz"),
        ("evaluate.codegen.mbpp_plus.source", "MbppPlus.jsonl.gz"),
    ]
    # tiny model, packaged MiniLM, shipped data and benchmark samples: nothing to fetch
    assert hub.hub_refs(local) == {"models": [], "datasets": [], "dataset_repos": [], "urls": []}


def test_refs_imports_extras_and_sources(paper, tmp_path):
    cfg = copy.deepcopy(paper)
    cfg["sft"]["import"] = {"skeleton": "LLM4Binary/sk2decompile-struct-6.7b", "skin": str(tmp_path)}
    cfg["skin_rl"]["import"] = "Qwen/Qwen3-8B"  # already named by dhrcl.models: listed once
    cfg["hub"] = {"models": ["org/extra"], "datasets": ["org/more-rows"]}
    cfg["evaluate"]["decompile"]["embedding"] = {
        "backend": "local",
        "local_model_path": "sentence-transformers/all-MiniLM-L6-v2",
    }
    cfg["data"]["sk2d_inputs"] = "examples"  # data.generate is not used then
    cfg["data"]["kodcode"]["source"]["path"] = str(tmp_path)  # a local copy wins over the hub id
    cfg["evaluate"]["codegen"]["benchmarks"] = ["humaneval", "bigcodebench_hard", "livecodebench"]
    cfg["evaluate"]["codegen"]["livecodebench"]["version"] = "v5"  # one file: test5.jsonl
    refs = hub.hub_refs(cfg)
    assert [k for k, _ in refs["models"]] == [
        "model.base",
        "sft.import.skeleton",
        "skin_rl.import",
        "dhrcl.models[Qwen3-4B].init",
        "dhrcl.models[Qwen3-14B].init",
        "dhrcl.reward_model.model",
        "embedding.server_model_path",
        "evaluate.decompile.embedding.local_model_path",
        "hub.models[0]",
    ]
    assert refs["datasets"] == [
        ("hub.datasets[0]", "org/more-rows", None),
        ("evaluate.codegen.bigcodebench_hard.source", "bigcode/bigcodebench-hard", None),
    ]
    assert refs["dataset_repos"] == [
        ("evaluate.codegen.livecodebench.source", "livecodebench/code_generation_lite", ["test5.jsonl"])
    ]
    assert not hub.is_hub_id("results/runs/x/hf", cfg) and not hub.is_hub_id("tiny") and not hub.is_hub_id("a/b/c")

# Cluster bring-up targets (docs/cluster.md): `prefetch` fills the Hugging Face cache from the login node so
# that jobs can run offline (hub.offline_jobs); library code in codegrpo/hub.py.

from codegrpo.smoke import decompile_data as _smoke_decompile_data


localrules:
    prefetch,


rule prefetch:
    output:
        res("hub", "prefetch.json"),
    log:
        logpath("prefetch", "prefetch.log"),
    conda:
        "../envs/data.yaml"
    threads: 1
    params:
        refs=_hub.hub_refs(config),
        hf_home=str(_hub.cache_home(config)),
        models_dir=str(_hub.hub_cache(config)),
        datasets_dir=str(_hub.datasets_cache(config)),
    script:
        "../workflow_scripts/prefetch.py"


# `smoke`: a new cluster's GPU stack on one node in minutes (codegrpo/smoke.py): imports, a vLLM engine on a
# tiny model, the embedding server up and down, 2 GRPO steps with the vLLM rollout (toy task), one vLLM
# evaluation batch. Its inputs are its own: nothing of the pipeline runs first.
# Not part of `all`; the job succeeds whatever the checks find: read results/smoke/report.md.
rule smoke:
    input:
        # the configured HumanEval-Decompile file, or the shipped legacy one when that is a URL
        decompile=_smoke_decompile_data(config),
    output:
        report=res("smoke", "report.md"),
        json=res("smoke", "report.json"),
    log:
        logpath("smoke", "smoke.log"),
    conda:
        "../envs/train.yaml"
    threads: 2
    resources:
        **stage_resources("smoke"),
    params:
        cfg={
            k: config[k]
            for k in (
                "device",
                "seed",
                "cluster",
                "sft",
                "skeleton_rl",
                "skin_rl",
                "compile_reward",
                "embedding",
                "smoke",
            )
        },
        out_dir=lambda w, output: os.path.dirname(output.report),
        logs_dir=logpath("smoke"),
    script:
        "../workflow_scripts/smoke.py"

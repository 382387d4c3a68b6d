# Cluster bring-up targets (docs/cluster.md): `prefetch` fills the Hugging Face cache from the login node so
# that jobs can run offline (hub.offline_jobs); library code in codegrpo/hub.py.


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

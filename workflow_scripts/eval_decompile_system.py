"""Snakemake script of rule eval_decompile_system: two-phase inference + re-executability of one model system."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from codegrpo.workflow import script_job  # noqa: E402
from codegrpo.eval.decompile import run_system  # noqa: E402
from codegrpo.eval.generate import GenerationSettings  # noqa: E402

with script_job(snakemake) as sm:  # noqa: F821  (injected by Snakemake)
    p = sm.params
    settings = GenerationSettings.from_params(p, temperature=0.0, n=1)
    system = p.system
    run_system(
        system["name"],
        sm.input.skeleton,
        sm.input.get("skin"),
        p.data,
        sm.output[0],
        benchmark=sm.wildcards.benchmark,
        protocol=p.protocol,
        input_field=p.input_field,
        cache_dir=p.cache,
        settings=settings,
        backend=p.backend,
        levels=tuple(p.levels),
        tasks_per_level=p.tasks_per_level,
        workers=sm.threads,
        timeout=p.timeout_s,
        sandbox_limits=p.sandbox,
        label=system.get("label"),
        variant=system.get("variant"),
        identifier=p.identifier and bool(system.get("skin")),
        embedding=p.embedding,
        embedding_log=sm.log.embedding,
        normalizer_style=p.style,
        cfg=dict(p.items()),
    )

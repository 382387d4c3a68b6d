"""What several evaluation tests share: the shipped MBPP-Decompile sample and its gold baseline."""

MBPP_SAMPLE = "data/sk2decompile/mbpp-decompile-sample.json"


def mbpp_gold(repo_root, tmp_path, **kw) -> dict:
    """The gold baseline (the reference functions) on the MBPP-Decompile sample under the sk2decompile protocol,
    written to tmp_path/gold.json; ``kw`` goes to ``run_baseline``."""
    from codegrpo.eval import decompile as d

    files = (repo_root / MBPP_SAMPLE, tmp_path / "gold.json")
    return d.run_baseline("gold", *files, benchmark="mbpp_decompile", protocol="sk2decompile", **kw)

"""codegrpo: library behind the Snakemake pipeline (rewards, data, sandbox, curriculum, verl adapter).

Nothing in this package imports Snakemake or ``workflow_scripts``; verl-specific names live only in
``codegrpo.verl``.
"""

__version__ = "0.1.0"

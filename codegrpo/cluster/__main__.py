"""``python -m codegrpo.cluster``: start Ray over the current SLURM job, print its state, stop it (see ``_main``);
``python -m codegrpo.cluster check --configfile ...``: every stage's resources against the cluster's nodes
(:mod:`codegrpo.cluster.shape`)."""

import sys

if sys.argv[1:2] == ["check"]:
    from codegrpo.cluster.shape import main

    sys.exit(main(sys.argv[2:]))

from codegrpo.cluster import _main

sys.exit(_main())

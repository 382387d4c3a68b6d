"""``python -m codegrpo.cluster``: start Ray over the current SLURM job, print its state, stop it (see ``_main``)."""

import sys

from codegrpo.cluster import _main

sys.exit(_main())

"""Snakemake script of rule data_kodcode: KodCode train / val / held-out slices for DHRCL."""

import logging
import os

from codegrpo.data.kodcode import prepare_kodcode
from codegrpo.io import log_to

sm = snakemake  # noqa: F821  (injected by Snakemake)
log_to(sm.log[0])
try:
    prepare_kodcode(
        list(sm.input),
        out_dir=os.path.dirname(sm.output.train),
        val_fraction=sm.params.val_fraction,
        heldout_fraction=sm.params.heldout_fraction,
        seed=sm.params.seed,
        on_bad_record=sm.params.on_bad_record,
        max_line_bytes=sm.params.max_line_bytes,
    )
except Exception:
    logging.exception("data_kodcode failed")
    raise

"""Data stage: raw JSONL -> validated, normalised records -> verl parquet files.

Modules:
  ingest     line-by-line reading and validation of the configured datasets (quarantine or stop)
  normalize  SK2Decompile pseudo-code normalisation (spec section 4.2 step 1)
  headers    Psyche-C header adapter and gcc syntax validation of header + ground truth
  parquet    verl RL / SFT parquet writers and the deterministic train/val split
  kodcode    KodCode preparation for DHRCL (train / val / held-out slices)
"""

from codegrpo.data.ingest import BadRecord, DataError  # noqa: F401

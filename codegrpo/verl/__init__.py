"""The verl adapter: the only package that names verl's config keys, modules and classes.

* :mod:`codegrpo.verl.launch` builds each training stage's command line from the pipeline config and checks it
  by Hydra composition against verl's own config before anything is launched.
* :mod:`codegrpo.verl.stages` runs a stage end to end: import or train, export ``hf/``, write ``done.json``.
* :mod:`codegrpo.verl.driver` is the GRPO driver (it does not import verl; its TaskRunner actor does).
* :mod:`codegrpo.verl.trainer` is the project TaskRunner and the RayPPOTrainer subclass with the
  plug-in hook (driver plug-ins, validate and step callbacks) and reward-component metrics.
* :mod:`codegrpo.verl.sft_main` is the SFT entry point (torchrun) around verl's ``fsdp_sft_trainer``.
* :mod:`codegrpo.verl.metrics` writes ``metrics.jsonl`` through a subclass of verl's ``Tracking``.
* :mod:`codegrpo.verl.cpu` holds CPU mode (fake Ray GPU, gloo, sdpa, ...), applied only when ``device: cpu``.
* :mod:`codegrpo.verl.checkpoints` knows verl's checkpoint layout and merges FSDP shards to Hugging Face.
* ``reward_entry.py`` is the reward file verl loads; ``dhrcl.py`` / ``losses.py`` are the DHRCL plug-ins.
* ``codegrpo/verl/config/*.yaml`` are the project Hydra configs layered over verl's.

Importing this package does not import verl (verl pulls torch and Ray in).
"""

VERL_VERSION = "0.4.1"  # the verl release every key and class named in this package is read from


def installed_verl_version() -> str | None:
    """The installed verl distribution's version (without importing verl), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verl")
    except PackageNotFoundError:
        return None

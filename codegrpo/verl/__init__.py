"""The verl adapter: the only package that names verl's config keys, modules and classes.

* :mod:`codegrpo.verl.launch` builds each training stage's command line from the pipeline config and checks it
  by Hydra composition against verl's own config before anything is launched.
* :mod:`codegrpo.verl.trainer` is the project TaskRunner / RayPPOTrainer subclass with the plug-in hook
  (validate and step callbacks, plug-in modules) and the per-step metrics file.
* :mod:`codegrpo.verl.cpu` holds CPU mode (fake Ray GPU, gloo, sdpa, ...), applied only when ``device: cpu``.
* :mod:`codegrpo.verl.checkpoints` knows verl's checkpoint layout and merges FSDP shards to Hugging Face.
* ``codegrpo/verl/config/*.yaml`` are the project Hydra configs layered over verl's.

Importing this package does not import verl (verl pulls torch and Ray in).
"""

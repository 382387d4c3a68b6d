# Helpers of the training stages (sft, skeleton_rl, skin_rl, dhrcl): config slices, model paths, run outputs.
# Included by rules/sft.smk (which the Snakefile includes before rl.smk and dhrcl.smk).
from codegrpo.verl.dhrcl import plan_runs as dhrcl_plan_runs
from codegrpo.verl.dhrcl import run_name as dhrcl_run
from codegrpo.verl.dhrcl import needs_tiny_reward_model
from codegrpo.packaged import PACKAGED as PACKAGED_MODELS
from codegrpo.packaged import parse_ref as packaged_ref


def training_cfg(*sections):
    """The parts of the config a training job needs (the library takes a plain dict)."""
    out = {
        "device": config["device"],
        "seed": config["seed"],
        "cluster": config["cluster"],
        "model": config["model"],
    }
    out.update({s: config[s] for s in sections})
    return out


def model_ref_input(ref):
    """Input that provides model reference ``ref``: the tiny model folder (``tiny``), a packaged model's folder
    (``packaged:<name>``, rule packaged_model), or nothing for a hub id / local folder.
    """
    if ref == "tiny":
        return [res("models", "tiny")]
    name = packaged_ref(ref)
    return [res("models", name)] if name else []


def model_ref_path(ref):
    """The folder (or hub id) a model reference stands for (see model_ref_input)."""
    found = model_ref_input(ref)
    return found[0] if found else ref


def base_model_input():
    """Input that provides model.base (model_ref_input)."""
    return model_ref_input(config["model"]["base"])


def base_model_path():
    return model_ref_path(config["model"]["base"])


def run_hf(run):
    return res("runs", run, "hf")


def run_done(run):
    return res("runs", run, "done.json")


SFT_INIT = {
    "skeleton": "base",
    "skin": config["sft"]["skin_init"],
}


def sft_imported(which):
    return bool(config["sft"]["import"].get(which))


def sft_inputs(wildcards):
    which = wildcards.which
    if sft_imported(which):
        return {}
    out = {
        "train": res("data", "sft", f"{which}.train.parquet"),
        "val": res("data", "sft", f"{which}.val.parquet"),
    }
    init = SFT_INIT[which]
    if init == "base":
        out["init"] = base_model_input()
    else:
        out["init"] = run_done(init)
    return out


def sft_init_model(wildcards):
    init = SFT_INIT[wildcards.which]
    return base_model_path() if init == "base" else run_hf(init)


def rl_inputs(stage, data_stage, init_run):
    """Input function of an RL stage: its RL parquet pair and the done.json of the run it starts from
    (nothing when the stage imports a checkpoint instead of training)."""

    def inputs(wildcards):
        if config[stage]["import"]:
            return {}
        return {
            "train": res("data", "rl", f"{data_stage}.train.parquet"),
            "val": res("data", "rl", f"{data_stage}.val.parquet"),
            "init": run_done(init_run),
        }

    return inputs


# stage -> (RL data of, run it starts from, config sections its reward reads)
RL_STAGES = {
    "skeleton_rl": ("skeleton", "sft_skeleton", ("compile_reward",)),
    "skin_rl": ("skin", "sft_skin", ("embedding", "compile_reward")),
}


def rl_params(stage):
    data_stage, init_run, sections = RL_STAGES[stage]
    return {
        "stage": stage,
        "cfg": training_cfg(stage, *sections),
        "train": res("data", "rl", f"{data_stage}.train.parquet"),
        "val": res("data", "rl", f"{data_stage}.val.parquet"),
        "init_model": run_hf(init_run),
        "run_dir": lambda w, output: os.path.dirname(output.done),
    }


def dhrcl_runs(seeds=None):
    """DHRCL run names (dhrcl-<variant>-seed<seed>) of every configured variant at the given seeds (default:
    every seed of dhrcl.seeds)."""
    return list(dhrcl_plan_runs(config, seeds))


def dhrcl_reward_model_input(run):
    """The tiny reward model folder when run's variant scores with dhrcl.reward_model.model: tiny, else nothing."""
    tiny = needs_tiny_reward_model(config["dhrcl"], DHRCL_PLAN[run]["variant"])
    return [res("models", "tiny_rm")] if tiny else []


def dhrcl_init_input(run):
    """Input that provides a DHRCL run's init model (model.base for init: base, else its own reference)."""
    init = DHRCL_PLAN[run]["init"]
    return base_model_input() if init == "base" else model_ref_input(init)


def dhrcl_init_path(run):
    init = DHRCL_PLAN[run]["init"]
    return base_model_path() if init == "base" else model_ref_path(init)

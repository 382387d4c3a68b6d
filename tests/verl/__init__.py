def launch_files(tmp_path, **kw) -> dict:
    """grpo_launch / sft_launch keywords with placeholder inputs under tmp_path (a launch reads none of them);
    ``kw`` replaces any of them."""
    return {
        "train_files": tmp_path / "t.parquet",
        "val_files": tmp_path / "v.parquet",
        "model_path": "/m",
        "run_dir": tmp_path / "r",
        **kw,
    }


def dhrcl_launch_at(cfg: dict, variant: str, tmp_path, run: str | None = None, **kw):
    """``codegrpo.verl.dhrcl.dhrcl_launch`` of ``variant`` with placeholder parquet inputs and model under tmp_path
    and the run folder ``tmp_path/run`` (default ``dhrcl-<variant>``); ``kw`` adds or replaces keywords."""
    from codegrpo.verl import dhrcl as vd

    files = {"train_files": str(tmp_path / "t.parquet"), "val_files": str(tmp_path / "v.parquet")}
    kw = {**files, "init_model": str(tmp_path / "model"), "run_dir": tmp_path / (run or f"dhrcl-{variant}"), **kw}
    return vd.dhrcl_launch(cfg, variant, **kw)

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

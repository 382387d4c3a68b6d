"""A GRPO run's settings and run folder (codegrpo.verl.grpo_settings); the launch from them is tested with the
launches (tests/verl/test_launch.py, tests/verl/test_cpu.py)."""

from __future__ import annotations

from codegrpo.verl.grpo_settings import FINISHED_FILE, prepare_run_dir


def test_rerun_resumes_only_an_unfinished_run_with_the_same_settings(tmp_path):
    run = tmp_path / "skeleton_rl"
    settings = {"run": "skeleton_rl", "section": {"lr": 1e-6}}
    assert prepare_run_dir(run, settings) == "fresh"
    (run / "checkpoints").mkdir()
    assert prepare_run_dir(run, settings) == "resume" and (run / "checkpoints").is_dir()
    # changed settings: the old run moves aside, the new one starts empty
    assert prepare_run_dir(run, {**settings, "section": {"lr": 2e-6}}) == "fresh"
    aside = sorted(tmp_path.glob("skeleton_rl.prev-*"))
    assert len(aside) == 1 and (aside[0] / "checkpoints").is_dir() and not (run / "checkpoints").exists()
    # a finished run is never continued
    (run / "checkpoints").mkdir()
    (run / FINISHED_FILE).write_text("{}")
    assert prepare_run_dir(run, {**settings, "section": {"lr": 2e-6}}) == "fresh"
    assert len(list(tmp_path.glob("skeleton_rl.prev-*"))) == 2 and not (run / "checkpoints").exists()

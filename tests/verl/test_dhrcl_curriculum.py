"""The DHRCL curriculum in verl's trainer (codegrpo.verl.dhrcl_curriculum): validation metrics, the stage actor, the
callbacks and their resume."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from codegrpo.runsettings import SETTINGS_ENV
from codegrpo.verl import dhrcl as vd
from codegrpo.verl import dhrcl_curriculum as dc


def test_validation_components_pick_the_largest_n():
    m = {
        "val-aux/kodcode/r_exec/mean@1": 0.1,
        "val-aux/kodcode/r_exec/mean@4": 0.4,
        "val-aux/kodcode/r_exec/std@4": 9.0,
        "val-core/kodcode/reward/mean@4": 2.0,
        "val-aux/other/r_syntax/mean@1": 7.0,
    }
    assert dc.validation_components(m) == {"r_exec": 0.4, "reward": 2.0}


@pytest.mark.slow
def test_on_validate_drives_stage_actor_and_resumes(tmp_path, monkeypatch):
    """Real local Ray: the named actor carries the stage, state is saved and restored after a 'restart'."""
    import ray

    from codegrpo.rewards import dhrcl as reward

    run_dir = tmp_path / "dhrcl-full"
    run_dir.mkdir()
    ccfg = {"total_steps": 100, "eval_every": 1, "window": 2, "patience": 1, "min_steps": 0}
    settings = {
        "variant": "full",
        "variant_def": vd.resolve_variant({}, "full"),
        "run_dir": str(run_dir),
        "curriculum": ccfg,
    }
    (run_dir / "settings.json").write_text(json.dumps({"settings": {"extra": settings}}))
    monkeypatch.setenv(SETTINGS_ENV, str(run_dir / "settings.json"))

    def val(step, syn, exe):
        trainer = SimpleNamespace(global_steps=step)
        return dc.on_validate(
            trainer,
            {
                "val-aux/kodcode/r_syntax/mean@1": syn,
                "val-aux/kodcode/r_exec/mean@1": exe,
                "val-aux/kodcode/r_pass/mean@1": 0.0,
            },
        )

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        monkeypatch.setattr(dc, "_STATE", None)
        monkeypatch.setattr(dc, "_HANDLE", None)
        monkeypatch.setattr(dc, "_READ_HANDLE", None)
        with pytest.raises(RuntimeError, match="not found"):  # inside Ray, no silent stage 1
            dc.current_stage()
        assert val(0, 0.5, 0.1)["curriculum/stage"] == 1.0
        assert dc.current_stage() == 1 and reward._STAGE_PROVIDER is dc.current_stage
        m = val(1, 0.5, 0.1)  # flat window of 2 -> plateau -> stage 2
        assert m["curriculum/stage"] == 2.0 and m["curriculum/advanced"] == 1.0
        assert dc.current_stage() == 2
        # another reader (as the workers do) sees the same actor
        assert ray.get(ray.get_actor(dc.STATE_ACTOR_NAME).get.remote()) == 2
        assert dc.on_step(SimpleNamespace(global_steps=1), 1, {"x": 1.0})["dhrcl/stage"] == 2.0
        val(2, 0.5, 0.3)
        saved = json.loads((run_dir / "curriculum.json").read_text())
        assert saved["stage"] == 2 and [h["step"] for h in saved["history"]] == [0, 1, 2]
        # "restart" resuming from a checkpoint at step 1: state restored, step 1 re-validated
        monkeypatch.setattr(dc, "_STATE", None)
        dc._HANDLE and ray.get(dc._HANDLE.set.remote(1))
        m = val(1, 0.5, 0.1)
        assert dc._STATE.controller.transitions[0]["step"] == 1 and dc.current_stage() == 2
        assert [h["step"] for h in dc._STATE.controller.history] == [0, 1]
    finally:
        reward.set_stage_provider(None)
        monkeypatch.setattr(dc, "_HANDLE", None)
        monkeypatch.setattr(dc, "_READ_HANDLE", None)
        ray.shutdown()

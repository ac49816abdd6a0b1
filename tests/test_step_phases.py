"""The step-phase clock: every interval charged to the innermost open phase, nothing without a running clock,
and a training step marks the phases the step profile reports."""

from __future__ import annotations

import pytest

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel import step_phases
from nerfstudio_accel.step_phases import PhaseClock, phase


class FakeTime:
    """``time.perf_counter`` that moves only when told."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_interval_is_charged_to_the_innermost_open_phase(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(step_phases.time, "perf_counter", fake)
    clock = PhaseClock("cpu")
    with clock.running():
        fake.now += 1
        with phase("outer"):
            fake.now += 2
            with phase("inner"):
                fake.now += 3
            fake.now += 4
            with phase("inner"):
                fake.now += 0.5
        fake.now += 5
    assert dict(clock.seconds) == {"other": 6.0, "outer": 6.0, "inner": 3.5}


def test_phases_charge_nothing_without_a_running_clock_and_one_clock_runs_at_a_time(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(step_phases.time, "perf_counter", fake)
    clock = PhaseClock("cpu")
    with phase("outside"):
        fake.now += 1
    assert not clock.seconds
    with clock.running():
        with pytest.raises(RuntimeError, match="already running"):
            with PhaseClock("cpu").running():
                pass
        with phase("a"):
            fake.now += 1
    assert dict(clock.seconds) == {"a": 1.0, "other": 0.0}
    with phase("after"):  # the clock stopped: charged to nothing
        fake.now += 1
    assert "after" not in clock.seconds


@pytest.mark.parametrize("mining", [True, False], ids=["mining", "no-mining"])
def test_a_training_step_marks_its_phases(tiny_scene, tmp_path, mining):
    trainer = make_trainer(tiny_scene, tmp_path, pipeline={"hard_mining": mining})
    clock = PhaseClock("cpu")
    with clock.running():
        run_steps(trainer, 0, 2)  # step 0 updates the occupancy grid
    common = {"ray batch", "grid update", "culling density pass", "graph forward", "backward", "optimizer"}
    mined_only = {"scoring forward", "render and output gradients", "importance and selection"}
    assert common <= set(clock.seconds)
    assert "marching" not in clock.seconds  # the CPU defaults march inside the fused culling pass
    if mining:
        assert mined_only <= set(clock.seconds) and "render and loss" not in clock.seconds
    else:
        assert not mined_only & set(clock.seconds) and "render and loss" in clock.seconds
    assert all(seconds >= 0 for seconds in clock.seconds.values())

"""OpenMP's wait policy: set for the processes this package starts unless the user chose one, and ns-train on the
CPU says how to set it."""

from __future__ import annotations

import pytest

from accel_test_helpers import make_trainer
from nerfstudio_accel.openmp_wait import openmp_wait_setting, passive_wait_environment, wait_policy_hint


def test_a_started_process_waits_passively_unless_the_user_chose_how():
    assert passive_wait_environment({"PATH": "/bin"}) == {"PATH": "/bin", "OMP_WAIT_POLICY": "PASSIVE"}
    assert passive_wait_environment({"OMP_WAIT_POLICY": ""})["OMP_WAIT_POLICY"] == "PASSIVE"  # empty: not chosen
    assert passive_wait_environment({"OMP_WAIT_POLICY": "ACTIVE"}) == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert passive_wait_environment({"GOMP_SPINCOUNT": "1000"}) == {"GOMP_SPINCOUNT": "1000"}
    environ = {"PATH": "/bin"}
    passive_wait_environment(environ)
    assert environ == {"PATH": "/bin"}  # a copy: this process's environment is left alone


def test_the_setting_is_named_as_the_user_would_type_it():
    assert openmp_wait_setting({}) == ""
    assert (
        openmp_wait_setting({"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"})
        == "OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=0"
    )


def test_the_hint_is_for_runs_through_numba_kernels_without_a_policy():
    hint = wait_policy_hint({}, numba_kernels=True)
    assert hint is not None and "OMP_WAIT_POLICY=PASSIVE" in hint and len(hint.splitlines()) == 1
    assert wait_policy_hint({}, numba_kernels=False) is None
    assert wait_policy_hint({"OMP_WAIT_POLICY": "PASSIVE"}, numba_kernels=True) is None
    assert wait_policy_hint({"GOMP_SPINCOUNT": "0"}, numba_kernels=True) is None


@pytest.mark.parametrize(
    "chosen, backends, said",
    [
        (None, {}, True),  # the CPU's defaults: the kernel hash encoding and marcher
        ("PASSIVE", {}, False),
        (None, {"hash_backend": "torch", "occupancy.backend": "torch"}, False),  # no numba kernel to slow down
        (None, {"hash_backend": "torch"}, True),  # the marcher still is one
    ],
)
def test_a_cpu_trainer_says_how_to_start_without_spinning_threads(
    chosen, backends, said, tiny_scene, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    if chosen is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", chosen)
    make_trainer(tiny_scene, tmp_path, setup=False, model=backends)
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "Training precision: fp32 on cpu" in out
    assert ("start with OMP_WAIT_POLICY=PASSIVE" in out) == said

"""ns-viewer's seam: nerfstudio's Viewer finds each accel model's FinishedRunViewer among
the pipeline's ViewerControls and sets it up; without a trainer it opens pages beside the first training
camera and, on CPU, starts Max res at the Fast preset; with one (ns-train) it leaves both to TrainingViewer.
The page in a real browser: tests/viewer/test_browser.py."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
from nerfstudio.viewer.utils import parse_object
from nerfstudio.viewer.viewer_elements import ViewerControl

from accel_test_helpers import make_trainer
from nerfstudio_accel.methods import accel_nerfacto
from nerfstudio_accel.viewer import page_camera
from nerfstudio_accel.viewer.finished_run import CPU_MAX_RES, FinishedRunViewer

METHODS = {
    "accel-ngp": {},
    "accel-nerfacto": dict(method=accel_nerfacto.config, model={"implementation": "torch"}),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_nerfstudios_viewer_finds_the_models_control(tiny_scene, tmp_path, name):
    pipeline = make_trainer(tiny_scene, tmp_path, **METHODS[name]).pipeline
    controls = [control for _, control in parse_object(pipeline, ViewerControl, "Custom Elements")]
    assert [type(control) for control in controls] == [FinishedRunViewer]


def fake_viewer(pipeline, trainer):
    """What FinishedRunViewer reads of nerfstudio's Viewer, with a server that records its handlers."""
    handlers = {}
    server = SimpleNamespace(on_client_connect=lambda handler: handlers.setdefault("connect", handler))
    viewer = SimpleNamespace(
        trainer=trainer,
        pipeline=pipeline,
        get_model=lambda: pipeline.model,
        viser_server=server,
        control_panel=SimpleNamespace(_max_res=SimpleNamespace(value=512)),
    )
    return viewer, handlers


def test_without_a_trainer_pages_open_beside_the_first_training_camera_at_the_cpu_preset(tiny_scene, tmp_path):
    pipeline = make_trainer(tiny_scene, tmp_path).pipeline
    viewer, handlers = fake_viewer(pipeline, trainer=None)
    FinishedRunViewer()._setup(viewer)
    assert viewer.control_panel._max_res.value == CPU_MAX_RES

    updates = []
    client = SimpleNamespace(camera=SimpleNamespace(on_update=updates.append), atomic=contextlib.nullcontext)
    handlers["connect"](client)
    page = SimpleNamespace(position=np.full(3, 3.0), wxyz=np.array([1.0, 0.0, 0.0, 0.0]), look_at=np.zeros(3), fov=1.3)
    updates[0](page)  # the page's first camera message
    camera_to_world, fov, centre = page_camera.first_training_view(pipeline)
    wxyz, position, look_at = page_camera.page_pose(camera_to_world, centre)
    assert np.allclose(page.position, position) and np.allclose(page.wxyz, wxyz) and np.allclose(page.look_at, look_at)
    assert page.fov == pytest.approx(fov)


def test_with_a_trainer_it_leaves_the_page_to_the_training_viewer(tiny_scene, tmp_path):
    trainer = make_trainer(tiny_scene, tmp_path)
    viewer, handlers = fake_viewer(trainer.pipeline, trainer=trainer)
    FinishedRunViewer()._setup(viewer)
    assert viewer.control_panel._max_res.value == 512 and not handlers

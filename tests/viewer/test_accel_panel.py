"""The viewer's Accel panel: statistics, the markdown it shows against the pipeline's own metrics, the
3D overlays' toggles, and no panel (no cost) without a viewer. A real viser server, no browser."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from accel_test_helpers import make_trainer, run_steps
from conftest import cli_env
from headless_browser import free_port, viewer_port
from nerfstudio_accel.viewer import accel_panel, page_camera, scene_overlays
from nerfstudio_accel.viewer.accel_panel import AccelPanel, summary_markdown
from nerfstudio_accel.viewer.training_stats import TrainingStats
from nerfstudio_accel.viewer.training_viewer import TrainingViewer


@pytest.fixture
def viser_server():
    viser = pytest.importorskip("viser")
    server = viser.ViserServer(host="127.0.0.1", port=free_port(), verbose=False)
    yield server
    server.stop()


def test_the_viewer_port_is_read_back_when_the_asked_one_is_taken(tmp_path):
    """free_port's number can be taken before the server binds it (here by the test itself): viser moves on
    to the next free port, and viewer_port reads back the one it listens on, where viser's page is."""
    pytest.importorskip("viser")
    with socket.socket() as taker:
        taker.bind(("127.0.0.1", free_port()))
        taker.listen()
        asked = taker.getsockname()[1]
        serve = f"import time, viser; viser.ViserServer(host='127.0.0.1', port={asked}); time.sleep(300)"
        with (tmp_path / "viser.log").open("w") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", serve], stdout=log, stderr=subprocess.STDOUT, env=cli_env()
            )
        try:
            port = viewer_port(tmp_path / "viser.log", process, timeout=120)
            assert port != asked
            with urllib.request.urlopen(f"http://127.0.0.1:{port}", timeout=30) as page:
                assert b"<title>Viser</title>" in page.read()
        finally:
            process.kill()
            process.wait()


def test_stats_average_over_the_window_and_thin_the_history():
    stats = TrainingStats(max_steps=100, window=2, history_points=4)
    for step, (seconds, rays, psnr) in enumerate([(1.0, 100, 10.0), (0.5, 200, 12.0), (0.5, 300, 11.0)]):
        stats.record(
            step,
            seconds,
            loss=0.1 / (step + 1),
            metrics={"num_rays_per_batch": rays, "num_samples_per_batch": 10 * rays, "psnr": psnr},
        )
    values = stats.snapshot()
    assert values["rays_per_second"] == pytest.approx(500 / 1.0)  # the last two steps only
    assert values["samples_per_second"] == pytest.approx(5000 / 1.0)
    assert values["samples_per_ray"] == pytest.approx(10.0)
    assert values["best_psnr"] == 12.0 and values["psnr"] == 11.0
    assert values["eta_seconds"] == pytest.approx((100 - 1 - 2) * 0.5)
    for step in range(3, 10):
        stats.record(step, 0.1, loss=0.0, metrics={"psnr": 20.0})
    assert len(stats.history) <= 4 and stats.history[-1][1] == 20.0
    culled = TrainingStats(max_steps=1)
    culled.record(
        0, 1.0, 0.0, {}, sampling={"candidates": 100, "kept": 30, "alpha_culled": 50, "occupied_fraction": 0.25}
    )
    values = culled.snapshot()
    assert values["alpha_culled_fraction"] == 0.5 and values["early_stopped_fraction"] == pytest.approx(0.2)
    assert values["occupied_fraction"] == 0.25
    assert "evaluated_per_kept" not in values  # a sampler that does not count its density evaluations
    culled.record(1, 1.0, 0.0, {}, sampling={"candidates": 100, "evaluated": 60, "kept": 24, "alpha_culled": 30})
    assert culled.snapshot()["evaluated_per_kept"] == pytest.approx(2.5)


def attach(trainer, panel: AccelPanel) -> None:
    """Give ``trainer`` the viewer side of a run with ``panel``, refreshed every ``--accel-panel-every`` steps."""
    viewer_state = SimpleNamespace(train_util=0.9)
    control_panel = SimpleNamespace(train_util=0.9)
    trainer.training_viewer = TrainingViewer(
        trainer.pipeline, panel, trainer.config.accel_panel_every, viewer_state, control_panel
    )


def test_summary_leaves_out_unknown_values_and_formats_the_eta():
    text = summary_markdown({"step": 5, "rays_per_second": 1234.4, "psnr": float("nan"), "eta_seconds": 3725.0})
    assert "| training rays/s | 1,234 |" in text and "| ETA | 1h 02m |" in text and "PSNR" not in text


def test_panel_shows_the_pipelines_own_metrics(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path, accel_panel_every=1)
    panel = AccelPanel(
        viser_server,
        trainer.pipeline,
        TrainingStats(max_steps=100, precision=trainer.precision),
        chart_every_seconds=0.0,
    )
    attach(trainer, panel)
    run_steps(trainer, 0, 3)
    metrics = trainer.last_metrics
    text = panel.summary.content
    assert "| training step | 2 |" in text
    assert f"| hard mining b | {int(metrics['hard_mining_b']):,} |" in text
    assert f"| hard mining B | {int(metrics['hard_mining_B']):,} |" in text
    assert f"| training PSNR (dB) | {float(metrics['psnr']):.2f} |" in text
    assert f"| samples per ray | {float(metrics['num_samples_per_ray']):.1f} |" in text
    occupied = trainer.pipeline.model.sampler.occupied_fraction()
    assert f"| occupied grid cells | {occupied:.1%} |" in text and "| precision | fp32 |" in text
    assert f"| input stall (wait for batch) | {float(metrics['input_stall_fraction']):.1%} |" in text
    assert len(panel.stats.history) == 3 and len(panel.chart.figure.data[0].x) == 3
    counts = trainer.pipeline.model.sampling_figures()  # the panel turned the culling counts on
    assert counts["candidates"] >= counts["kept"] + counts["alpha_culled"] and counts["kept"] > 0


def test_the_charts_clock_counts_every_step_not_only_the_recorded_ones(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path, accel_panel_every=3)
    attach(trainer, AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=100)))
    run_steps(trainer, 0, 7)  # recorded at steps 0, 3 and 6
    stats = trainer.accel_panel.stats
    recorded = sum(record.seconds for record in stats.steps)
    assert (
        stats.history[-1][0] == trainer.training_viewer.training_seconds > recorded
    )  # four unrecorded steps add their time


def test_the_panel_shows_the_culling_counts_of_the_steps_it_reads(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path, accel_panel_every=3)
    attach(trainer, AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=100)))
    run_steps(trainer, 0, 4)  # read at steps 0 and 3
    values = trainer.accel_panel.stats.snapshot()
    counts = trainer.pipeline.model.sampling_figures()  # step 3's
    assert values["step"] == 3 and counts["candidates"] > 0
    assert values["alpha_culled_fraction"] == pytest.approx(counts["alpha_culled"] / counts["candidates"])
    assert values["evaluated_per_kept"] == pytest.approx(counts["evaluated"] / counts["kept"])
    text = trainer.accel_panel.summary.content
    assert f"| densities evaluated per kept sample | {counts['evaluated'] / counts['kept']:.2f} |" in text


def test_the_chart_is_redrawn_at_most_every_chart_interval(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path, accel_panel_every=1)
    attach(trainer, AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10), chart_every_seconds=3600.0))
    run_steps(trainer, 0, 3)
    assert len(trainer.accel_panel.chart.figure.data[0].x) == 1  # drawn at the first refresh only
    assert "| training step | 2 |" in trainer.accel_panel.summary.content  # the table follows every refresh


def test_toggles_add_and_remove_bounded_scene_nodes(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path)
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10), max_points=50)
    attach(trainer, panel)
    run_steps(trainer, 0, 2)
    assert panel.nodes == {} and not trainer.pipeline._keeping_hard_samples
    panel.show_sampling.value = True
    panel.draw_sampling()
    grid, _ = scene_overlays.sampler_state_points(trainer.pipeline.model.sampler, 50)
    assert accel_panel.STATE_NODE in panel.nodes and 0 < grid.shape[0] <= 50
    drawn = panel.nodes[accel_panel.STATE_NODE]
    sent = []
    add_point_cloud = viser_server.scene.add_point_cloud
    viser_server.scene.add_point_cloud = lambda *args, **kwargs: sent.append(kwargs) or add_point_cloud(*args, **kwargs)
    panel.draw_sampling()
    assert panel.nodes[accel_panel.STATE_NODE] is drawn  # the grid is sent again only after it changes
    sampler = trainer.pipeline.model.sampler
    sampler.update(0, trainer.pipeline.model.field.density)
    panel.draw_sampling()
    assert panel.nodes[accel_panel.STATE_NODE] is not drawn and len(sent) == 1
    cell = sampler.state_overlay().cell_size
    assert 2 * sent[0]["point_size"] == pytest.approx(0.35 * cell * 10.0)  # a third of a cell across, in viser units
    panel.show_hard.value = True
    panel.draw_hard_samples()
    assert trainer.pipeline._keeping_hard_samples and accel_panel.HARD_NODE not in panel.nodes  # no batch kept yet
    run_steps(trainer, 2, 1)
    panel.draw_hard_samples()
    assert accel_panel.HARD_NODE in panel.nodes
    panel.show_sampling.value = panel.show_hard.value = False
    panel.refresh()
    assert panel.nodes == {} and not trainer.pipeline._keeping_hard_samples


def test_a_split_scene_shows_each_blocks_samples_per_ray_and_outlines_its_cells(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path, accel_panel_every=1, pipeline={"spatial_blocks": 2})
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10))
    attach(trainer, panel)
    run_steps(trainer, 0, 2)
    figures = trainer.pipeline.model.sampling_figures()
    per_block = [figures["samples_per_ray_block_0"], figures["samples_per_ray_block_1"]]
    assert sum(per_block) == pytest.approx(float(trainer.last_metrics["num_samples_per_ray"]), rel=1e-5)
    text = panel.summary.content
    assert all(f"| samples per ray, block {k} | {per_block[k]:.1f} |" in text for k in (0, 1))
    assert "block 2" not in text and panel.show_cells.visible and panel.nodes == {}
    sent = []
    add_spline = viser_server.scene.add_spline_cubic_bezier
    viser_server.scene.add_spline_cubic_bezier = lambda *args, **kwargs: (
        sent.append(kwargs) or add_spline(*args, **kwargs)
    )
    panel.show_cells.value = True
    panel.refresh()
    panel.refresh()  # sent once while the toggle stays on
    assert sorted(panel.nodes) == [f"{accel_panel.CELLS_NODE}/0", f"{accel_panel.CELLS_NODE}/1"] and len(sent) == 2
    cells = trainer.pipeline.model.sampler.cell_boxes() * 10.0  # viser units
    for box, kwargs in zip(cells, sent):
        corners = kwargs["positions"]
        assert np.allclose(corners.min(axis=0), box[0].numpy()) and np.allclose(corners.max(axis=0), box[1].numpy())
    panel.show_cells.value = False
    panel.refresh()
    assert panel.nodes == {}


def test_one_model_has_no_cells_toggle_nor_block_rows(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path, accel_panel_every=1)
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10))
    attach(trainer, panel)
    run_steps(trainer, 0, 1)
    panel.show_cells.value = True
    panel.refresh()
    assert not panel.show_cells.visible and panel.nodes == {} and "block" not in panel.summary.content


def test_a_tick_redraws_between_steps_and_while_training_is_paused(tiny_scene, tmp_path, viser_server):
    """With the trainer's lock the toggle draws on its own (no refresh needed: training may be paused or
    done), but never while the lock is held, i.e. while a step trains."""
    import threading
    import time

    trainer = make_trainer(tiny_scene, tmp_path)
    train_lock = threading.Lock()
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10), train_lock=train_lock)

    def wait_for(condition) -> bool:
        deadline = time.monotonic() + 10.0
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)
        return condition()

    with train_lock:  # a step is training
        panel.show_sampling.value = True
        time.sleep(0.3)
        assert accel_panel.STATE_NODE not in panel.nodes
    assert wait_for(lambda: accel_panel.STATE_NODE in panel.nodes)
    panel.show_sampling.value = False
    assert wait_for(lambda: accel_panel.STATE_NODE not in panel.nodes)
    panel.show_hard.value = True
    assert wait_for(lambda: trainer.pipeline._keeping_hard_samples)


def test_no_hard_sample_toggle_without_hard_mining(tiny_scene, tmp_path, viser_server):
    """--pipeline.hard-mining False: the toggle is hidden, and ticking it anyway keeps no batch."""
    trainer = make_trainer(tiny_scene, tmp_path, pipeline={"hard_mining": False})
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10))
    assert not panel.show_hard.visible
    panel.show_hard.value = True
    panel.refresh()
    run_steps(trainer, 0, 1)
    assert not trainer.pipeline._keeping_hard_samples and trainer.pipeline.hard_samples() is None
    assert accel_panel.HARD_NODE not in panel.nodes


def test_both_overlays_draw_for_accel_nerfacto(tiny_scene, tmp_path, viser_server, monkeypatch):
    """accel-nerfacto's samples (mined when asked) give the overlays the same flat positions and ray indices as
    accel-ngp's."""
    from nerfstudio_accel.methods import accel_nerfacto

    trainer = make_trainer(
        tiny_scene,
        tmp_path,
        method=accel_nerfacto.config,
        pipeline={"hard_mining": True},
        model={"implementation": "torch"},
    )
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10), max_points=50)
    attach(trainer, panel)
    origin, direction = torch.tensor([0.0, -3.0, 0.5]), torch.tensor([0.0, 1.0, 0.0])
    monkeypatch.setattr(panel, "view_centre_ray", lambda: (origin, direction))
    panel.show_sampling.value = panel.show_hard.value = True
    run_steps(trainer, 0, 2)
    panel.refresh()
    assert accel_panel.CENTRE_RAY_NODE in panel.nodes and accel_panel.HARD_NODE in panel.nodes
    ray_indices, positions, n_rays, hard = trainer.pipeline.hard_samples()
    assert positions.shape == (ray_indices.numel(), 3) and int(ray_indices.max()) == n_rays - 1 and hard.numel() > 0


def test_hard_sample_shares_are_per_ray():
    rays = torch.tensor([0, 0, 0, 0, 1, 1])
    positions = torch.arange(18, dtype=torch.float32).reshape(6, 3)
    points, share = scene_overlays.hard_sample_points(rays, positions, 3, torch.tensor([1, 4, 5]), max_points=10)
    assert torch.equal(points, positions) and share.tolist() == [0.25] * 4 + [1.0, 1.0]
    points, share = scene_overlays.hard_sample_points(rays, positions, 3, torch.tensor([1]), max_points=2)
    assert points.shape == (2, 3) and share.shape == (2,)


def test_proposal_overlay_draws_the_main_samples_of_the_view_centre_ray(tmp_path, viser_server, monkeypatch):
    """For the proposal sampler the toggle draws its num_samples picks on the centre ray of the client's
    view, on that ray and in front of the camera; nothing without a client."""
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from nerfstudio_accel.scenes.unbounded_scene import UnboundedSceneSpec, generate_unbounded_scene

    scene = generate_unbounded_scene(
        tmp_path / "scene", UnboundedSceneSpec(num_train=6, num_val=1, num_test=1, resolution=16)
    )
    trainer = make_trainer(scene, tmp_path / "out", dataparser=NerfstudioDataParserConfig())
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10))
    panel.show_sampling.value = True
    panel.draw_sampling()
    assert panel.nodes == {}  # no client connected
    origin, direction = torch.tensor([0.1, -0.2, 0.3]), torch.tensor([0.0, 0.6, -0.8])
    monkeypatch.setattr(panel, "view_centre_ray", lambda: (origin, direction))
    panel.draw_sampling()
    assert accel_panel.CENTRE_RAY_NODE in panel.nodes
    points = scene_overlays.centre_ray_samples(trainer.pipeline.model, origin, direction)
    assert points.shape == (trainer.pipeline.model.config.proposal.num_samples, 3)
    along = (points - origin) @ direction
    assert (along > 0).all() and torch.allclose(origin + along[:, None] * direction, points, atol=1e-4)
    assert trainer.pipeline.model.training  # the overlay leaves the training mode as it was


def test_the_centre_ray_is_the_ray_nerfstudio_renders_through_the_view_centre():
    """The proposal overlay's ray follows nerfstudio's own viser-camera convention (its renders' rays)."""
    from types import SimpleNamespace

    import viser.transforms as vtf
    from nerfstudio.viewer.utils import get_camera
    from nerfstudio.viewer.viewer import Viewer

    camera = SimpleNamespace(
        wxyz=vtf.SO3.from_rpy_radians(0.3, -0.7, 1.9).wxyz, position=np.array([4.0, -2.0, 7.0]), fov=0.9, aspect=1.0
    )
    state = Viewer.get_camera_state(SimpleNamespace(ready=False, current_camera_idx=0), SimpleNamespace(camera=camera))
    rays = get_camera(state, 65, 65).generate_rays(camera_indices=0)
    origin, direction = page_camera.centre_ray(camera.wxyz, camera.position)
    assert torch.allclose(origin, rays.origins[32, 32].float(), atol=1e-5)
    assert torch.allclose(direction, rays.directions[32, 32].float(), atol=1e-5)


def test_viser_pose_inverts_nerfstudios_viser_to_nerfstudio_conversion():
    from types import SimpleNamespace

    import viser.transforms as vtf
    from nerfstudio.viewer.viewer import Viewer

    rotation = torch.tensor(vtf.SO3.from_rpy_radians(-0.4, 1.1, 2.5).as_matrix(), dtype=torch.float32)
    camera_to_world = torch.cat([rotation, torch.tensor([[0.5], [-3.0], [1.2]])], dim=1)
    wxyz, position = page_camera.viser_pose(camera_to_world)
    camera = SimpleNamespace(wxyz=wxyz, position=position, fov=0.7, aspect=1.5)
    state = Viewer.get_camera_state(SimpleNamespace(ready=False, current_camera_idx=0), SimpleNamespace(camera=camera))
    assert torch.allclose(state.c2w.float(), camera_to_world, atol=1e-5)


def test_a_page_opens_beside_a_training_camera_clear_of_its_frustum():
    """A page's camera is moved once, on its first camera message, to the training camera turned a few
    degrees about the scene: the scene's centre stays on the view axis at the same distance, and the
    training camera (whose frustum nerfstudio draws with its image) is outside the page's view."""
    import contextlib
    from types import SimpleNamespace

    import viser.transforms as vtf

    camera_to_world = torch.tensor(
        [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, -1.0, -4.0], [0.0, 1.0, 0.0, 0.3]]
    )  # looks along +y
    centre = torch.tensor([0.0, 0.5, 0.0])
    handlers = {}
    server = SimpleNamespace(on_client_connect=lambda f: handlers.setdefault("connect", f))
    page_camera.open_pages_at(server, camera_to_world, fov=0.7, centre=centre, step_aside_radians=math.radians(8.0))
    page = SimpleNamespace(position=np.zeros(3), wxyz=np.array([1.0, 0, 0, 0]), look_at=np.zeros(3), fov=1.3)
    client = SimpleNamespace(
        camera=SimpleNamespace(on_update=lambda f: handlers.setdefault("update", f)), atomic=contextlib.nullcontext
    )
    handlers["connect"](client)
    handlers["update"](page)

    scale = 10.0  # viser units per world unit
    pivot = np.array([0.0, 0.5, 0.3])  # the view axis' point nearest the centre
    assert np.allclose(page.look_at, pivot * scale) and page.fov == 0.7
    forward = vtf.SO3(page.wxyz).as_matrix() @ np.array([0.0, 0.0, 1.0])  # viser cameras look along +z
    assert np.allclose(page.position + forward * np.linalg.norm(page.look_at - page.position), page.look_at, atol=1e-6)
    assert np.linalg.norm(page.position / scale - pivot) == pytest.approx(4.5)
    assert np.degrees(np.arccos(forward @ np.array([0.0, 1.0, 0.0]))) == pytest.approx(8.0)
    to_training_camera = np.array([0.0, -4.0, 0.3]) * scale - page.position
    off_axis = np.degrees(np.arccos(forward @ to_training_camera / np.linalg.norm(to_training_camera)))
    assert off_axis > 60.0  # well outside any field of view a page has
    page.position = np.ones(3)  # the user moves; later camera messages leave the camera alone
    handlers["update"](page)
    assert np.allclose(page.position, 1.0)


def test_the_pages_train_util_slider_applies_and_cpu_starts_at_the_fast_preset(tiny_scene, tmp_path, viser_server):
    """nerfstudio 1.1.5 renders by a fixed train utilisation of 0.9 whatever its slider says; the trainer
    applies the slider before each viewer update, and on CPU starts the page at the Fast preset."""
    from types import SimpleNamespace

    trainer = make_trainer(tiny_scene, tmp_path)
    control_panel = SimpleNamespace(_train_util=SimpleNamespace(value=0.85), _max_res=SimpleNamespace(value=512))
    updates = []
    trainer.viewer_state = SimpleNamespace(
        viser_server=viser_server,
        control_panel=control_panel,
        train_util=0.9,
        update_scene=lambda step, rays: updates.append((step, trainer.viewer_state.train_util)),
    )
    trainer._init_viewer_state()
    assert trainer.accel_panel is not None
    assert (control_panel._train_util.value, control_panel._max_res.value) == (0.95, 256)
    control_panel.train_util = 0.6  # what the page's slider reads as
    trainer.config.vis = "viewer"  # nerfstudio calls the viewer update only when a viewer is enabled
    trainer._update_viewer_state(7)
    assert updates == [(7, 0.6)]


def test_no_viewer_no_panel(tiny_scene, tmp_path):
    trainer = make_trainer(tiny_scene, tmp_path)
    trainer._init_viewer_state()  # what Trainer.train calls; with --vis tensorboard there is no viewer
    run_steps(trainer, 0, 2)
    assert trainer.accel_panel is None and not trainer.pipeline._keeping_hard_samples
    assert trainer.pipeline.hard_samples() is None


def test_the_legacy_viewer_gets_no_panel(tiny_scene, tmp_path):
    """nerfstudio's legacy viewer has no control panel nor viser server: the trainer adds nothing to it."""
    trainer = make_trainer(tiny_scene, tmp_path)
    trainer.config.vis = "viewer_legacy"
    scenes = []
    trainer.viewer_state = SimpleNamespace(init_scene=lambda **scene: scenes.append(scene))
    trainer._init_viewer_state()
    assert len(scenes) == 1 and trainer.training_viewer is None and trainer.accel_panel is None

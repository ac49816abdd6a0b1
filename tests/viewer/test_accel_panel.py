"""The viewer's Accel panel: statistics, the markdown it shows against the pipeline's own metrics, the
3D overlays' toggles, and no panel (no cost) without a viewer. A real viser server, no browser."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.viewer import accel_panel, scene_overlays
from nerfstudio_accel.viewer.accel_panel import AccelPanel, summary_markdown
from nerfstudio_accel.viewer.headless_browser import free_port
from nerfstudio_accel.viewer.training_stats import TrainingStats
from accel_test_helpers import make_trainer, run_steps


@pytest.fixture
def viser_server():
    viser = pytest.importorskip("viser")
    server = viser.ViserServer(host="127.0.0.1", port=free_port(), verbose=False)
    yield server
    server.stop()


def test_stats_average_over_the_window_and_thin_the_history():
    stats = TrainingStats(max_steps=100, window=2, history_points=4)
    for step, (seconds, rays, psnr) in enumerate([(1.0, 100, 10.0), (0.5, 200, 12.0), (0.5, 300, 11.0)]):
        stats.record(step, seconds, loss=0.1 / (step + 1), metrics={"num_rays_per_batch": rays, "num_samples_per_batch": 10 * rays, "psnr": psnr})
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
    culled.record(0, 1.0, 0.0, {}, sampling={"candidates": 100, "kept": 30, "alpha_culled": 50, "occupied_fraction": 0.25})
    values = culled.snapshot()
    assert values["alpha_culled_fraction"] == 0.5 and values["early_stopped_fraction"] == pytest.approx(0.2)
    assert values["occupied_fraction"] == 0.25


def test_summary_leaves_out_unknown_values_and_formats_the_eta():
    text = summary_markdown({"step": 5, "rays_per_second": 1234.4, "psnr": float("nan"), "eta_seconds": 3725.0})
    assert "| training rays/s | 1,234 |" in text and "| ETA | 1h 02m |" in text and "PSNR" not in text


def test_panel_shows_the_pipelines_own_metrics(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path, accel_panel_every=1)
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=100, precision=trainer.precision), chart_every_seconds=0.0)
    trainer.accel_panel = panel
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
    assert len(panel.stats.history) == 3 and len(panel.chart.figure.data[0].x) == 3
    counts = trainer.pipeline.model.sampling_figures()  # the panel turned the culling counts on
    assert counts["candidates"] >= counts["kept"] + counts["alpha_culled"] and counts["kept"] > 0


def test_the_chart_is_redrawn_at_most_every_chart_interval(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path, accel_panel_every=1)
    trainer.accel_panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10), chart_every_seconds=3600.0)
    run_steps(trainer, 0, 3)
    assert len(trainer.accel_panel.chart.figure.data[0].x) == 1  # drawn at the first refresh only
    assert "| training step | 2 |" in trainer.accel_panel.summary.content  # the table follows every refresh


def test_toggles_add_and_remove_bounded_scene_nodes(tiny_scene, tmp_path, viser_server):
    trainer = make_trainer(tiny_scene, tmp_path)
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10), max_points=50)
    trainer.accel_panel = panel
    run_steps(trainer, 0, 2)
    assert panel.nodes == {} and not trainer.pipeline.record_hard_samples
    panel.show_sampling.value = True
    panel.draw_sampling()
    grid = scene_overlays.occupied_cell_centres(trainer.pipeline.model.sampler, 50)
    assert accel_panel.GRID_NODE in panel.nodes and 0 < grid.shape[0] <= 50
    panel.show_hard.value = True
    panel.draw_hard_samples()
    assert trainer.pipeline.record_hard_samples and accel_panel.HARD_NODE not in panel.nodes  # no batch kept yet
    run_steps(trainer, 2, 1)
    panel.draw_hard_samples()
    assert accel_panel.HARD_NODE in panel.nodes
    panel.show_sampling.value = panel.show_hard.value = False
    panel.refresh()
    assert panel.nodes == {} and not trainer.pipeline.record_hard_samples


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

    from nerfstudio_accel.data.unbounded_scene import UnboundedSceneSpec, generate_unbounded_scene

    scene = generate_unbounded_scene(tmp_path / "scene", UnboundedSceneSpec(num_train=6, num_val=1, num_test=1, resolution=16))
    trainer = make_trainer(scene, tmp_path / "out", dataparser=NerfstudioDataParserConfig())
    panel = AccelPanel(viser_server, trainer.pipeline, TrainingStats(max_steps=10))
    panel.show_sampling.value = True
    panel.draw_sampling()
    assert panel.nodes == {}  # no client connected
    origin, direction = torch.tensor([0.1, -0.2, 0.3]), torch.tensor([0.0, 0.6, -0.8])
    monkeypatch.setattr(panel, "view_centre_ray", lambda: (origin, direction))
    panel.draw_sampling()
    assert accel_panel.PROPOSAL_NODE in panel.nodes
    points = scene_overlays.centre_ray_samples(trainer.pipeline.model, origin, direction)
    assert points.shape == (trainer.pipeline.model.config.num_samples, 3)
    along = (points - origin) @ direction
    assert (along > 0).all() and torch.allclose(origin + along[:, None] * direction, points, atol=1e-4)
    assert trainer.pipeline.model.training  # the overlay leaves the training mode as it was


def test_the_pages_train_util_slider_applies_and_cpu_starts_at_the_fast_preset(tiny_scene, tmp_path, viser_server):
    """nerfstudio 1.1.5 renders by a fixed train utilisation of 0.9 whatever its slider says; the trainer
    applies the slider before each viewer update, and on CPU starts the page at the Fast preset."""
    from types import SimpleNamespace

    trainer = make_trainer(tiny_scene, tmp_path)
    control_panel = SimpleNamespace(_train_util=SimpleNamespace(value=0.85), _max_res=SimpleNamespace(value=512))
    updates = []
    trainer.viewer_state = SimpleNamespace(
        viser_server=viser_server, control_panel=control_panel, train_util=0.9,
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
    assert trainer.accel_panel is None and not trainer.pipeline.record_hard_samples
    assert not trainer.pipeline.model.record_sampling and trainer.pipeline.model.last_sampling == {}
    assert trainer.pipeline.last_hard_samples is None

"""AccelPanel: an "Accel" folder in nerfstudio's viewer (viser) with what this package does, live.

It holds a markdown table of :class:`~.training_stats.TrainingStats` (rays/s, samples/s, samples per ray,
grid occupancy, culling, hard mining, precision, loss scale, skipped steps, PSNR, ETA), a PSNR/loss
against training-time chart (plotly), and toggles, off by default, that draw into the 3D scene:
the sampler's own state (the occupancy grid's occupied cells) or, for a sampler without one (the proposal
sampler), its samples on the centre ray of the current view; the last mined batch's samples coloured by their ray's
share of hard samples; and, for a scene split into blocks, each block's cell outlined in its own colour (the table
then shows each block's samples per ray).
The trainer builds it only when a viewer exists and calls :meth:`AccelPanel.refresh` every few steps.
"""

from __future__ import annotations

import math
import time
from typing import Callable, ContextManager, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from nerfstudio.viewer.viewer import VISER_NERFSTUDIO_SCALE_RATIO

from nerfstudio_accel.spatial.cell_samplers import SAMPLES_PER_RAY_OF_BLOCK
from nerfstudio_accel.viewer import page_camera, scene_overlays
from nerfstudio_accel.viewer.training_stats import TrainingStats

STATE_NODE = "/accel/sampler_state"
CENTRE_RAY_NODE = "/accel/centre_ray_samples"
HARD_NODE = "/accel/hard_samples"
CELLS_NODE = "/accel/cells"

ROWS: List[Tuple[str, str, str]] = [
    ("step", "training step", "{:.0f}"),
    ("rays_per_second", "training rays/s", "{:,.0f}"),
    ("samples_per_second", "samples/s", "{:,.0f}"),
    ("samples_per_ray", "samples per ray", "{:.1f}"),
    ("input_stall_fraction", "input stall (wait for batch)", "{:.1%}"),
    ("occupied_fraction", "occupied grid cells", "{:.1%}"),
    ("alpha_culled_fraction", "alpha-culled samples", "{:.1%}"),
    ("early_stopped_fraction", "early-stopped samples", "{:.1%}"),
    ("evaluated_per_kept", "densities evaluated per kept sample", "{:.2f}"),
    ("mining_B", "hard mining B", "{:,.0f}"),
    ("mining_b", "hard mining b", "{:,.0f}"),
    ("mining_b_over_B", "b/B", "{:.2f}"),
    ("mining_tau_hat", "tau-hat", "{:.2f}"),
    ("mining_scoring_ms", "scoring pass (ms)", "{:.1f}"),
    ("mining_graph_forward_ms", "graph forward (ms)", "{:.1f}"),
    ("precision", "precision", "{}"),
    ("loss_scale", "loss scale", "{:g}"),
    ("skipped_steps", "skipped steps", "{:.0f}"),
    ("psnr", "training PSNR (dB)", "{:.2f}"),
    ("best_psnr", "best training PSNR (dB)", "{:.2f}"),
    ("eta_seconds", "ETA", "eta"),
]
"""Snapshot key, label, format; rows whose value is missing or nan are left out."""


def format_eta(seconds: float) -> str:
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else f"{seconds // 60}m {seconds % 60:02d}s"
    )


def summary_markdown(values: Dict[str, Union[int, float, str]]) -> str:
    """The panel's table: one ``| label | value |`` row per known value."""
    lines = ["| | |", "|---|---:|"]
    for key, label, fmt in ROWS:
        value = values.get(key)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            lines.append(f"| {label} | {format_eta(float(value)) if fmt == 'eta' else fmt.format(value)} |")
        if key == "samples_per_ray":  # a split scene's blocks, in order, below the whole ray's figure
            block = 0
            while f"{SAMPLES_PER_RAY_OF_BLOCK}{block}" in values:
                lines.append(f"| samples per ray, block {block} | {values[f'{SAMPLES_PER_RAY_OF_BLOCK}{block}']:.1f} |")
                block += 1
    return "\n".join(lines)


def history_figure(history: List[Tuple[float, float, float]]):
    """Plotly figure: training PSNR (left axis) and loss (right axis, log) against training seconds."""
    import plotly.graph_objects as go

    seconds = [h[0] for h in history]
    figure = go.Figure()
    figure.add_trace(go.Scatter(x=seconds, y=[h[1] for h in history], name="PSNR (dB)", mode="lines"))
    figure.add_trace(go.Scatter(x=seconds, y=[h[2] for h in history], name="loss", mode="lines", yaxis="y2"))
    figure.update_layout(
        margin=dict(l=30, r=30, t=10, b=30),
        height=220,
        showlegend=True,
        legend=dict(orientation="h", y=-0.25),
        xaxis=dict(title="training s"),
        yaxis=dict(title="PSNR"),
        yaxis2=dict(overlaying="y", side="right", type="log", dtick=1, tickformat=".0e"),
    )
    return figure


class AccelPanel:
    """The Accel folder on a viser server.

    Args:
        server: the viewer's ``viser.ViserServer``.
        pipeline: the training :class:`~nerfstudio_accel.pipelines.accel_pipeline.AccelPipeline` (its model's
            sampler and, with hard mining, its last batch).
        stats: the trainer's :class:`TrainingStats`.
        max_points: bound on the points of each 3D overlay.
        chart_every_seconds: least wall time between redraws of the chart.
        train_lock: the trainer's lock, held while a step trains; given, the toggles redraw as soon as
            they change (else at the next refresh). :meth:`refresh` must be called holding it.
    """

    def __init__(
        self,
        server,
        pipeline,
        stats: TrainingStats,
        max_points: int = 20_000,
        chart_every_seconds: float = 2.0,
        train_lock: Optional[ContextManager] = None,
    ) -> None:
        self.server, self.pipeline, self.stats, self.max_points = server, pipeline, stats, max_points
        self.chart_every_seconds = chart_every_seconds
        self.chart_drawn_at = float("-inf")
        self.nodes: Dict[str, object] = {}
        self.drawn_state_version: Optional[int] = None
        self.sampler = pipeline.model.own_sampler()
        self.shows_state = self.sampler is not None and self.sampler.state_version() is not None
        self.mines = pipeline.mines_hard_samples()
        self.cells = self.sampler.cell_boxes() if self.sampler is not None else None
        with server.gui.add_folder("Accel"):
            self.summary = server.gui.add_markdown("training starts...")
            self.chart = server.gui.add_plotly(history_figure([]), aspect=1.4)
            # a model without a sampler of this package's (accel-nerfacto) samples through nerfstudio's proposal one
            label = self.sampler.overlay_label if self.sampler is not None else "Show proposal samples (centre ray)"
            self.show_sampling = server.gui.add_checkbox(label, initial_value=False)
            self.show_hard = server.gui.add_checkbox("Show hard samples", initial_value=False, visible=self.mines)
            self.show_cells = server.gui.add_checkbox(
                "Show blocks' cells", initial_value=False, visible=self.cells is not None
            )
        if train_lock is not None:  # a tick redraws at once between steps, and while paused or done
            self._redraw_on_tick(self.show_sampling, self.draw_sampling, train_lock)
            self._redraw_on_tick(self.show_hard, self.draw_hard_samples, train_lock)
            self._redraw_on_tick(self.show_cells, self.draw_cells, train_lock)

    @staticmethod
    def _redraw_on_tick(checkbox, draw: Callable[[], None], train_lock: ContextManager) -> None:
        """Run ``draw`` when ``checkbox`` changes, on viser's thread, holding the trainer's lock (so never
        while a step trains; the trainer's refreshes run under the same lock)."""

        @checkbox.on_update
        def _(_) -> None:
            with train_lock:
                draw()

    def refresh(self) -> None:
        """Show the latest statistics, the chart at most every ``chart_every_seconds`` (a figure costs far more
        to build and send than the table; docs/viewer.md), and redraw the overlays that are on."""
        self.summary.content = summary_markdown(self.stats.snapshot())
        now = time.monotonic()
        if now - self.chart_drawn_at >= self.chart_every_seconds:
            self.chart.figure = history_figure(self.stats.history)
            self.chart_drawn_at = now
        self.draw_sampling()
        self.draw_hard_samples()
        self.draw_cells()

    def _replace(self, name: str, points: Optional[torch.Tensor], width: float, colours=None) -> None:
        """Draw ``points`` as scene node ``name``, each ``width`` across (both in world units), or remove the
        node when ``points`` is None. viser 0.2.7 draws a point ``2 * point_size`` across (its shader makes
        it ``point_size / tan(fov / 2) * height / depth`` pixels)."""
        old = self.nodes.pop(name, None)
        if points is None:
            if old is not None:
                old.remove()
            return
        colours = colours if colours is not None else (255, 160, 0)
        self.nodes[name] = self.server.scene.add_point_cloud(
            name,
            points=points.numpy().astype(np.float32) * VISER_NERFSTUDIO_SCALE_RATIO,
            colors=colours,
            point_size=0.5 * width * VISER_NERFSTUDIO_SCALE_RATIO,
        )

    def draw_sampling(self) -> None:
        """The sampler's own state, e.g. the occupied cells of the grid's finest level (sent again only after it
        changes), or the sampler's picks on the centre ray of the first connected client's view; removed when
        the toggle is off."""
        on = bool(self.show_sampling.value)
        if self.shows_state:
            version = self.sampler.state_version() if on else None
            if version == self.drawn_state_version:
                return
            self.drawn_state_version = version
            points, cell_size = scene_overlays.sampler_state_points(self.sampler, self.max_points) if on else (None, 0)
            self._replace(STATE_NODE, points, width=0.35 * cell_size)
            return
        ray = self.view_centre_ray() if on else None
        points = scene_overlays.centre_ray_samples(self.pipeline.model, *ray) if ray is not None else None
        self._replace(CENTRE_RAY_NODE, points, width=0.02, colours=(0, 200, 255))

    def view_centre_ray(self) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """Origin and direction (world units) of the centre ray of the first client's camera; None
        without a client."""
        clients = list(self.server.get_clients().values())
        return page_camera.centre_ray(clients[0].camera.wxyz, clients[0].camera.position) if clients else None

    def draw_hard_samples(self) -> None:
        """The last mined batch's samples, blue (no hard sample on the ray) to red (all hard); the
        pipeline keeps that batch only while the toggle is on."""
        on = self.mines and bool(self.show_hard.value)
        self.pipeline.keep_hard_samples(on)
        batch = self.pipeline.hard_samples() if on else None
        if batch is None:
            self._replace(HARD_NODE, None, width=0.0)
            return
        points, share = scene_overlays.hard_sample_points(*batch, max_points=self.max_points)
        self._replace(HARD_NODE, points, width=0.01, colours=scene_overlays.share_colours(share))

    def draw_cells(self) -> None:
        """Each cell of a split scene outlined in its block's colour (sent once while the toggle stays on);
        removed when the toggle is off."""
        on = self.cells is not None and bool(self.show_cells.value)
        drawn = [name for name in self.nodes if name.startswith(CELLS_NODE)]
        if on == bool(drawn):
            return
        for name in drawn:
            self.nodes.pop(name).remove()
        for block, box in enumerate(self.cells if on else ()):
            positions, controls = scene_overlays.box_outline(box)
            name = f"{CELLS_NODE}/{block}"
            self.nodes[name] = self.server.scene.add_spline_cubic_bezier(
                name,
                positions=positions * VISER_NERFSTUDIO_SCALE_RATIO,
                control_points=controls * VISER_NERFSTUDIO_SCALE_RATIO,
                line_width=2.0,
                color=scene_overlays.BLOCK_COLOURS[block],
            )

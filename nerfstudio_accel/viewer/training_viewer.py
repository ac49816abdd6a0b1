"""TrainingViewer: what this package adds to nerfstudio's web viewer while a run trains.

Built by the trainer once nerfstudio's viewer exists, and called back before each viewer update and
after each training step: the CPU render preset, pages opening beside the first training camera, the
page's Train Util slider in effect (nerfstudio 1.1.5 shows it but renders by a fixed 0.9), and the
:class:`~nerfstudio_accel.viewer.accel_panel.AccelPanel` fed every ``panel_every`` steps.
"""

from __future__ import annotations

from typing import Any, ContextManager, Dict, Optional

import torch

from nerfstudio_accel.viewer import page_camera
from nerfstudio_accel.viewer.accel_panel import AccelPanel
from nerfstudio_accel.viewer.finished_run import CPU_MAX_RES
from nerfstudio_accel.viewer.training_stats import TrainingStats


class TrainingViewer:
    """The viewer side of a training run (built by :meth:`attach`).

    Args:
        pipeline: the training :class:`~nerfstudio_accel.pipelines.accel_pipeline.AccelPipeline`.
        panel: the Accel panel, or None.
        panel_every: steps between panel refreshes.
        viewer_state: nerfstudio's ``Viewer``, whose Train Util :meth:`before_update` sets from ``control_panel``.
    """

    def __init__(self, pipeline, panel: Optional[AccelPanel], panel_every: int, viewer_state, control_panel) -> None:
        self.pipeline, self.panel, self.panel_every = pipeline, panel, panel_every
        self.viewer_state, self.control_panel = viewer_state, control_panel
        self.training_seconds = 0.0
        """Compute time of this run's training steps so far (the panel's clock)."""

    @classmethod
    def attach(
        cls,
        viewer_state,
        pipeline,
        device_type: str,
        opens_at_training_camera: bool,
        panel_every: int,
        stats: TrainingStats,
        train_lock: ContextManager,
    ) -> "TrainingViewer":
        """Set nerfstudio's viewer (``viewer_state``, not the legacy one) up for this run: the CPU render preset
        (``device_type`` cpu), pages opening beside the first training camera, an Accel panel refreshed every
        ``panel_every`` steps (0: none) showing ``stats``; ``train_lock`` is the trainer's lock, held while a step
        trains."""
        control_panel, server = viewer_state.control_panel, viewer_state.viser_server
        if device_type == "cpu":  # nerfstudio's "Fast" preset: renders hold training up
            control_panel._train_util.value, control_panel._max_res.value = 0.95, CPU_MAX_RES
        if opens_at_training_camera:
            page_camera.open_pages_at(server, *page_camera.first_training_view(pipeline))
        panel = AccelPanel(server, pipeline, stats, train_lock=train_lock) if panel_every > 0 else None
        return cls(pipeline, panel, panel_every, viewer_state, control_panel)

    def before_update(self) -> None:
        """Before nerfstudio's viewer update: the page's Train Util slider decides the render share."""
        self.viewer_state.train_util = self.control_panel.train_util

    def after_step(self, step: int, seconds: float, loss: torch.Tensor, metrics_dict: Dict[str, Any]) -> None:
        """Every ``panel_every`` steps: this step's figures into the panel's statistics, and a refresh
        (every step adds its time to the panel's training clock)."""
        if self.panel is None:
            return
        self.training_seconds += seconds
        if step % self.panel_every != 0:
            return
        metrics = {name: float(value) for name, value in metrics_dict.items() if torch.as_tensor(value).numel() == 1}
        self.panel.stats.record(
            step,
            seconds,
            float(loss),
            metrics,
            self.pipeline.model.sampling_figures(),
            training_seconds=self.training_seconds,
        )
        self.panel.refresh()

"""FinishedRunViewer: what this package adds to nerfstudio's web viewer when ``ns-viewer`` opens a finished run.

``ns-viewer --load-config RUN/config.yml`` (nerfstudio's ``scripts/viewer/run_viewer.py``) builds nerfstudio's
``Viewer`` from the loaded pipeline, without this package's trainer. The seam nerfstudio leaves there: the
``Viewer`` calls ``_setup(viewer)`` on every ``ViewerControl`` among the pipeline's attributes (its model's
included), and the accel models hold one of these. Without it a page opened at viser's default camera, inside the
scene, where every ray crosses the occupied cells, and asked for a first full frame at Max res 512: on the demo
run on a CPU, a 47x30 px image for the first 55 to 85 s (docs/viewer.md). With it:

- each page opens beside the first training camera (:func:`~nerfstudio_accel.viewer.page_camera.open_pages_at`),
  looking at the scene, where rays keep a few samples;
- on CPU, Max res starts at nerfstudio's "Fast" preset (256), as it does while training: nerfstudio renders a
  small frame sized to its measured rays/s first, then one at Max res (adjustable in the Control tab).

While training, the trainer's :class:`~nerfstudio_accel.viewer.training_viewer.TrainingViewer` does both (the
``Viewer`` then has a trainer), and this does nothing.
"""

from __future__ import annotations

from nerfstudio.viewer.viewer_elements import ViewerControl

from nerfstudio_accel.viewer import page_camera

CPU_MAX_RES = 256
"""A page's Max res on CPU, while training too: nerfstudio's "Fast" preset (its default, 512, is four times the rays)."""


class FinishedRunViewer(ViewerControl):
    """Set up by nerfstudio's ``Viewer`` (see the module docstring); keeps no reference to it."""

    def _setup(self, viewer) -> None:
        """For a ``viewer`` without a trainer (``ns-viewer``): on CPU the "Fast" Max res, and pages opening
        beside the first training camera."""
        if viewer.trainer is not None:
            return
        if viewer.get_model().device.type == "cpu":
            viewer.control_panel._max_res.value = CPU_MAX_RES
        page_camera.open_pages_at(viewer.viser_server, *page_camera.first_training_view(viewer.pipeline))

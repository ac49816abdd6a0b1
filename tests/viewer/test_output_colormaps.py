"""Every output a model returns renders through nerfstudio's own colormap code, as the web viewer (every
colormap its dropdown offers, normalised or not, the split screen's second output included) and
``ns-render`` (depth outputs through the depth colormap) apply it."""

from __future__ import annotations

import pytest
import torch
from nerfstudio.utils import colormaps
from nerfstudio.viewer.control_panel import _get_colormap_options

from accel_test_helpers import make_trainer
from nerfstudio_accel.methods import accel_nerfacto

MODELS = {
    "accel-ngp occupancy": dict(model={"sampler": "occupancy"}),
    "accel-ngp proposal": dict(model={"sampler": "proposal"}),
    "accel-nerfacto": dict(method=accel_nerfacto.config, model={"implementation": "torch"}),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_every_output_renders_in_every_colormap_the_viewer_offers(tiny_scene, tmp_path, name):
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path, **MODELS[name])
    model = trainer.pipeline.model
    model.eval()
    camera = trainer.pipeline.datamanager.eval_dataset.cameras[0:1]
    with torch.no_grad():
        outputs = model.get_outputs_for_camera(camera)
    assert "num_samples_per_ray" in outputs
    height, width = int(camera.height), int(camera.width)
    for output_name, image in outputs.items():
        assert image.shape[:2] == (height, width), output_name
        offered = _get_colormap_options(image.shape[-1], image.dtype)
        assert offered, f"the viewer offers no colormap for {output_name} ({image.dtype}, {image.shape[-1]} channels)"
        for colormap in offered:
            for normalize in (True, False):
                options = colormaps.ColormapOptions(colormap=colormap, normalize=normalize)
                rendered = colormaps.apply_colormap(image, colormap_options=options)
                assert rendered.shape == (height, width, 3), (output_name, colormap)
                assert rendered.is_floating_point() and bool(torch.isfinite(rendered).all()), (output_name, colormap)
        if "depth" in output_name:  # ns-render's path for depth outputs
            depth = colormaps.apply_depth_colormap(image, accumulation=outputs["accumulation"])
            assert depth.shape == (height, width, 3)

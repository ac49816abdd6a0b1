"""accel-nerfacto: nerfstudio's nerfacto behind :class:`~nerfstudio_accel.models.base.AccelModel`'s seams.

The model is nerfacto (proposal sampling, hash-grid field with appearance embedding, nerfstudio's
renderers and losses), split into:

- :meth:`AccelNerfactoModel.sample`: camera-optimizer tweaks and proposal sampling. The proposal
  networks keep their graph, so the interlevel loss trains them as usual;
- :meth:`AccelNerfactoModel.field_raw`: pre-activation density and colour of the main field;
- :meth:`AccelNerfactoModel.render`: activations, weights, nerfstudio's renderers.

With hard mining (the default, measured: docs/hard_mining.md) the main field learns from the hard samples
only; with ``--pipeline.hard-mining False`` it is nerfacto. Two nerfacto options need the main field's outputs
with a graph for every sample (normal prediction, distance-squared gradient scaling); they are refused
when the config is resolved. Outside training the model still renders ``normals``, from the density's gradient
(what ``ns-export pointcloud`` and ``poisson`` read), at no cost to training.
LPIPS is computed only when its weights are on disk (see :mod:`nerfstudio_accel.metrics`).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Type

import torch
from jaxtyping import Float, Int
from nerfstudio.cameras.rays import RayBundle, RaySamples
from nerfstudio.data.scene_box import SceneBox
from nerfstudio.field_components.activations import trunc_exp
from nerfstudio.field_components.field_heads import FieldHeadNames
from nerfstudio.field_components.mlp import MLP
from nerfstudio.fields.nerfacto_field import NerfactoField
from nerfstudio.models.nerfacto import NerfactoModel, NerfactoModelConfig
from torch import Tensor, nn

from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.fields.density_normals import rendered_normals
from nerfstudio_accel.fields.hash_grid_field import FieldImplementation
from nerfstudio_accel.geometry import pose_corrected_rays
from nerfstudio_accel.metrics import UnavailableLPIPS, lpips_without_downloads
from nerfstudio_accel.models.base import AccelModel, AccelModelConfig
from nerfstudio_accel.ops.backends import check_implementation, resolve_implementation
from nerfstudio_accel.step_phases import phase
from nerfstudio_accel.viewer.finished_run import FinishedRunViewer


@dataclass
class AccelNerfactoModelConfig(AccelModelConfig, NerfactoModelConfig):
    """nerfacto with sample / field_raw / render seams (see module docstring)."""

    _target: Type = field(default_factory=lambda: AccelNerfactoModel)
    implementation: FieldImplementation = "auto"  # type: ignore[assignment]
    """Field kernels: tiny-cuda-nn (tcnn) or pure PyTorch (torch); auto: tcnn on CUDA when tiny-cuda-nn
    imports, else torch. Written into config.yml as tcnn or torch when training starts."""

    def _resolve(self, device_type: str, scene: SceneFacts) -> None:
        """``implementation=auto`` for ``device_type`` (the two store different parameters); the nerfacto
        options the seams cannot serve are refused."""
        if self.predict_normals or self.use_gradient_scaling:
            raise ConfigError(
                "accel-nerfacto does not support --pipeline.model.predict-normals or "
                "--pipeline.model.use-gradient-scaling; use nerfacto for those (ns-export reads accel-nerfacto's "
                "normals without predict-normals)"
            )
        self.implementation = resolve_implementation(self.implementation, device_type)  # type: ignore[assignment]

    def uses_tcnn(self) -> bool:
        return self.implementation == "tcnn"

    def hard_mining_pays(self, device_type: str, scene: SceneFacts) -> bool:
        """At equal time (CPU, 150 s, three seeds) mining was ahead in every pair on an object scene (lego) and
        behind on a phone capture (fruit): on for bounded scenes, off for captures. Off on CUDA, where a mined
        step of the proposal sampler costs 1.66x an ordinary one (accel-ngp, H200), and on MPS (unmeasured)."""
        return device_type == "cpu" and scene.bounded


@dataclass
class ProposalSamples:
    """The main field's samples ``ray_samples`` (``[n_rays, n_per_ray]``, or flat after :meth:`subset`)
    and the proposal rounds' weights and samples that the interlevel and distortion losses need."""

    ray_samples: RaySamples
    weights_list: List[Float[Tensor, "n_rays n_per_ray 1"]]
    ray_samples_list: List[RaySamples]

    @property
    def n_rays(self) -> int:
        return self.ray_samples.shape[0]

    @property
    def ray_indices(self) -> Int[Tensor, " n_samples"]:
        """Ray of each flat sample (row-major over ``[n_rays, n_per_ray]``), as :class:`PackedSamples` has it."""
        n_rays, per_ray = self.ray_samples.shape[:2]
        return torch.arange(n_rays, device=self.ray_samples.frustums.origins.device).repeat_interleave(per_ray)

    @property
    def positions(self) -> Float[Tensor, "n_samples 3"]:
        """World-space sample points, flat (row-major), as :class:`PackedSamples` has them."""
        return self.ray_samples.frustums.get_positions().reshape(-1, 3)

    def subset(self, index: Int[Tensor, " m"]) -> "ProposalSamples":
        """Samples at flat ``index`` (a flat ``[m]`` batch; proposal rounds not carried)."""
        return ProposalSamples(self.ray_samples.flatten()[index], [], [])


class RawColorNerfactoField(NerfactoField):
    """NerfactoField whose colour head ends without its sigmoid, so the pre-activation colour exists;
    ``get_outputs`` applies the sigmoid, so ``forward`` returns what nerfacto's field returns."""

    def __init__(self, *args, implementation: str = "tcnn", **kwargs) -> None:
        super().__init__(*args, implementation=implementation, **kwargs)
        head = self.mlp_head
        self.mlp_head = MLP(
            in_dim=head.in_dim,
            num_layers=head.num_layers,
            layer_width=head.layer_width,
            out_dim=head.out_dim,
            activation=nn.ReLU(),
            out_activation=None,
            implementation=implementation,
        )

    def get_outputs(
        self, ray_samples: RaySamples, density_embedding: Optional[Tensor] = None
    ) -> Dict[FieldHeadNames, Tensor]:
        outputs = self.raw_outputs(ray_samples, density_embedding)
        outputs[FieldHeadNames.RGB] = torch.sigmoid(outputs[FieldHeadNames.RGB])
        return outputs

    def raw_outputs(
        self, ray_samples: RaySamples, density_embedding: Optional[Tensor] = None
    ) -> Dict[FieldHeadNames, Tensor]:
        """nerfacto's field outputs with the colour before its sigmoid."""
        return super().get_outputs(ray_samples, density_embedding)

    def field_raw(self, ray_samples: RaySamples) -> Tuple[Float[Tensor, "*bs 1"], Float[Tensor, "*bs 3"]]:
        """Pre-activation density and colour (density = ``average_init_density * trunc_exp(sigma')`` inside the box)."""
        _, geo_features = self.get_density(ray_samples)
        raw_density = self._density_before_activation
        return raw_density, self.raw_outputs(ray_samples, density_embedding=geo_features)[FieldHeadNames.RGB]

    def raw_density_at(self, positions: Float[Tensor, "n 3"]) -> Float[Tensor, "n 1"]:
        """Pre-activation density at world ``positions`` (nerfacto's ``density_fn``), differentiable in them."""
        self.density_fn(positions)
        return self._density_before_activation

    def activate_density(self, ray_samples: RaySamples, raw_density: Float[Tensor, "*bs 1"]) -> Float[Tensor, "*bs 1"]:
        """nerfacto's density activation, zero outside the scene box (or its contraction)."""
        positions = ray_samples.frustums.get_positions()
        if self.spatial_distortion is not None:
            positions = (self.spatial_distortion(positions) + 2.0) / 4.0
        else:
            positions = SceneBox.get_normalized_positions(positions, self.aabb)
        inside = ((positions > 0.0) & (positions < 1.0)).all(dim=-1, keepdim=True)
        return self.average_init_density * trunc_exp(raw_density.float()) * inside


@contextmanager
def _nerfacto_field_swapped():
    """While nerfacto's ``populate_modules`` runs: it builds our field class."""
    from nerfstudio.models import nerfacto as nerfacto_module

    original = nerfacto_module.NerfactoField
    nerfacto_module.NerfactoField = RawColorNerfactoField  # type: ignore[misc]
    try:
        yield
    finally:
        nerfacto_module.NerfactoField = original  # type: ignore[misc]


class AccelNerfactoModel(AccelModel, NerfactoModel):
    """nerfacto split into the hard-mining seams."""

    config: AccelNerfactoModelConfig
    field: RawColorNerfactoField

    def populate_modules(self) -> None:
        device_type = torch.device(self.kwargs.get("device", "cpu")).type
        check_implementation(self.config.implementation, device_type, "accel-nerfacto")
        with _nerfacto_field_swapped(), lpips_without_downloads():
            super().populate_modules()
        self.finished_run_viewer = FinishedRunViewer()  # nerfstudio's Viewer sets it up (ns-viewer's page)

    # --- the three seams -------------------------------------------------------------------------

    def sample(self, ray_bundle: RayBundle) -> ProposalSamples:
        """Near/far planes, the camera optimizer's tweaks, then proposal sampling (with the proposal
        networks' graph). Applying the collider again when ``forward`` already did is harmless."""
        if self.collider is not None:
            ray_bundle = self.collider(ray_bundle)
        if self.training and self.config.camera_optimizer.mode != "off":  # nerfstudio's apply_to_raybundle, in fp32
            ray_bundle.origins, ray_bundle.directions = pose_corrected_rays(
                self.camera_optimizer, ray_bundle.origins, ray_bundle.directions, ray_bundle.camera_indices.reshape(-1)
            )
        with phase("proposal rounds"):
            ray_samples, weights_list, ray_samples_list = self.proposal_sampler(
                ray_bundle, density_fns=self.density_fns
            )
        return ProposalSamples(ray_samples, weights_list, ray_samples_list)

    def field_raw(self, samples: ProposalSamples) -> Tuple[Float[Tensor, "*bs 1"], Float[Tensor, "*bs 3"]]:
        """Pre-activation density and colour of the main field."""
        return self.field_forward(self.field.field_raw, samples.ray_samples)

    def render(
        self, samples: ProposalSamples, raw_density: Float[Tensor, "*bs 1"], raw_color: Float[Tensor, "*bs 3"]
    ) -> Dict[str, Tensor]:
        """nerfacto's rendering of the activated outputs (its outputs dict, proposal depths included); outside
        training also ``normals`` from the density's gradient (:mod:`~nerfstudio_accel.fields.density_normals`)."""
        ray_samples = samples.ray_samples
        density = self.field.activate_density(ray_samples, raw_density)
        weights = ray_samples.get_weights(density)
        rgb = self.renderer_rgb(rgb=torch.sigmoid(raw_color.float()), weights=weights)
        with torch.no_grad():
            depth = self.renderer_depth(weights=weights, ray_samples=ray_samples)
        outputs = {
            "rgb": rgb,
            "accumulation": self.renderer_accumulation(weights=weights),
            "depth": depth,
            "expected_depth": self.renderer_expected_depth(weights=weights, ray_samples=ray_samples),
            "num_samples_per_ray": torch.full(
                (ray_samples.shape[0], 1), float(ray_samples.shape[-1]), device=rgb.device
            ),
        }
        if self.training:
            outputs["weights_list"] = samples.weights_list + [weights]
            outputs["ray_samples_list"] = samples.ray_samples_list + [ray_samples]
        else:
            outputs["normals"] = rendered_normals(
                self.field.raw_density_at, samples.positions, weights.reshape(-1), samples.ray_indices, samples.n_rays
            )
        for i in range(self.config.num_proposal_iterations):
            outputs[f"prop_depth_{i}"] = self.renderer_depth(
                weights=samples.weights_list[i], ray_samples=samples.ray_samples_list[i]
            )
        return outputs

    # --- nerfstudio Model API --------------------------------------------------------------------

    def get_outputs(self, ray_bundle: RayBundle) -> Dict[str, Tensor]:
        samples = self.sample(ray_bundle)
        with phase("graph forward"):
            raw = self.field_raw(samples)
        with phase("render and loss"):
            return self.render(samples, *raw)

    def get_metrics_dict(self, outputs, batch) -> Dict[str, Tensor]:
        metrics = super().get_metrics_dict(outputs, batch)
        metrics["num_samples_per_batch"] = outputs["num_samples_per_ray"].sum()
        return metrics

    def get_image_metrics_and_images(self, outputs, batch):
        """nerfacto's metrics and images, with LPIPS left out when its weights are not on disk."""
        metrics, images = super().get_image_metrics_and_images(outputs, batch)
        if isinstance(self.lpips, UnavailableLPIPS):
            metrics.pop("lpips")
        return metrics, images

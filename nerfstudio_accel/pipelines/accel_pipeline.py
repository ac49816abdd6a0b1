"""AccelPipeline: nerfstudio's dynamic-batch pipeline plus the set-up accel methods need.

Before nerfstudio loads any data it
- resolves ``scene_contraction=auto`` from the data parser (off for blender-data, on otherwise);
- keeps the alpha channel of RGBA images (nerfstudio's blender parser bakes white into it by
  default) so the model can blend one background colour into both prediction and target.

Nothing here reads an image while the pipeline is built, so nerfstudio's tools (``ns-render``'s inference
mode) work from config.yml and a checkpoint alone. What training needs of the data is the trainer's to
ask for: :func:`check_scene` (the scene folder, one line naming the problem instead of a stack trace) and
:meth:`AccelPipeline.resolve_training_data_defaults` (choices that follow from the images).

During training it sizes the ray batch so each step marches about ``target_num_samples`` samples.

Under torch.distributed (``--machine.num-devices N``) the model is not wrapped in DDP: rank 0's weights
and buffers are broadcast once, and the trainer averages gradients after each backward
(:mod:`nerfstudio_accel.distributed`). Each rank draws its own rays and sizes its own ray batch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Type

import torch
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
from nerfstudio.data.dataparsers.colmap_dataparser import ColmapDataParserConfig
from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
from nerfstudio.pipelines.dynamic_batch import DynamicBatchPipeline, DynamicBatchPipelineConfig

from nerfstudio_accel import distributed
from nerfstudio_accel.data.validation import check_blender_scene, check_colmap_scene, check_nerfstudio_scene

logger = logging.getLogger(__name__)


@dataclass
class AccelPipelineConfig(DynamicBatchPipelineConfig):
    """Dynamic ray batch aiming at a fixed number of samples per step, with input checks."""

    _target: Type = field(default_factory=lambda: AccelPipeline)
    target_num_samples: Optional[int] = None  # type: ignore[assignment]
    """Samples per training step the ray batch is sized for; default 2^18 on CUDA, 2^14 elsewhere."""
    max_num_samples_per_ray: int = 1 << 10
    """Sets the first step's ray batch: target_num_samples / this."""
    max_num_rays_per_batch: Optional[int] = None
    """Upper bound on the dynamic ray batch; default 2^16 on CUDA, 2^12 elsewhere."""

    def resolve_device_defaults(self, device_type: str) -> None:
        """Fill unset device-dependent choices for ``device_type`` in place, the model's too (a CPU step
        costs ~100x a GPU step per sample), and the data-dependent ones (:func:`prepare_model_config`).
        AccelTrainer calls this before nerfstudio saves config.yml."""
        prepare_model_config(self)
        on_cuda = device_type == "cuda"
        if self.target_num_samples is None:
            self.target_num_samples = 1 << 18 if on_cuda else 1 << 14
        if self.max_num_rays_per_batch is None:
            self.max_num_rays_per_batch = 1 << 16 if on_cuda else 1 << 12
        resolve_model = getattr(self.model, "resolve_device_defaults", None)
        if resolve_model is not None:
            resolve_model(device_type)


def scene_data_path(config: AccelPipelineConfig) -> Optional[Path]:
    """The scene folder the data manager will read (``--data`` wins over the parser's own)."""
    data = getattr(config.datamanager, "data", None) or getattr(config.datamanager.dataparser, "data", None)
    return Path(data) if data is not None else None


def check_scene(config: AccelPipelineConfig, test_mode: str) -> None:
    """Validate the scene folder for the configured parser; raises :class:`SceneDataError`."""
    data = scene_data_path(config)
    parser = config.datamanager.dataparser
    if data is None:
        return
    if isinstance(parser, BlenderDataParserConfig):
        splits = ["train"] + ([test_mode] if test_mode in ("val", "test") else [])
        check_blender_scene(data, splits)
    elif isinstance(parser, NerfstudioDataParserConfig):
        check_nerfstudio_scene(data)
    elif isinstance(parser, ColmapDataParserConfig):
        check_colmap_scene(data, parser.colmap_path, parser.images_path, parser.load_3D_points)


def prepare_model_config(config: AccelPipelineConfig) -> None:
    """Resolve data-dependent model defaults in place (before the model is built)."""
    model, parser = config.model, config.datamanager.dataparser
    if getattr(model, "scene_contraction", None) == "auto":
        model.scene_contraction = "off" if isinstance(parser, BlenderDataParserConfig) else "on"
    resolve_data_defaults = getattr(model, "resolve_data_defaults", None)
    if resolve_data_defaults is not None:
        resolve_data_defaults()
    if getattr(parser, "alpha_color", None) is not None and hasattr(model, "background"):
        parser.alpha_color = None  # keep RGBA: the model blends the background into prediction and target alike


class AccelPipeline(DynamicBatchPipeline):
    """nerfstudio pipeline for accel methods (see module docstring)."""

    config: AccelPipelineConfig

    def __init__(
        self,
        config: AccelPipelineConfig,
        device: str,
        test_mode: Literal["test", "val", "inference"] = "val",
        world_size: int = 1,
        local_rank: int = 0,
        grad_scaler: Optional[torch.cuda.amp.GradScaler] = None,
    ):
        prepare_model_config(config)
        config.resolve_device_defaults(torch.device(device).type)  # a no-op for configs that ns-train saved
        # world_size 1: no DDP wrapper (nerfstudio's is CUDA-only and bypassed by hard mining); see the module docstring
        super().__init__(config, device, test_mode, 1, local_rank, grad_scaler)
        self.world_size, self.local_rank = world_size, local_rank
        distributed.broadcast_state(self.model)
        self.rays_in_last_batch = 0
        """Rays of the batch the last training step trained on (the trainer weights this rank's gradient by it)."""

    def resolve_training_data_defaults(self) -> None:
        """The model's choices that follow from the training images (their alpha channel), resolved into its
        config before training; reads one image. Rank 0 prints what a user should know."""
        resolve_background = getattr(self.config.model, "resolve_background", None)
        if resolve_background is None or self.datamanager.train_dataset is None:
            return
        warning = resolve_background(self.datamanager.train_dataset.get_image_float32(0).shape[-1] == 4)
        if warning is not None and distributed.rank() == 0:
            logger.warning(warning)

    def get_train_loss_dict(self, step: int):
        """One training batch through the model: ``(outputs, loss_dict, metrics)``; the ray batch then scales
        toward ``target_num_samples`` for the steps to come."""
        ray_bundle, batch = self.datamanager.next_train(step)
        outputs = self.model(ray_bundle)
        metrics = self.model.get_metrics_dict(outputs, batch)
        loss_dict = self.model.get_loss_dict(outputs, batch, metrics)
        self._after_training_batch(len(ray_bundle), metrics)
        return outputs, loss_dict, metrics

    def _after_training_batch(self, rays: int, metrics: dict) -> None:
        """Record the batch's ``rays`` (also as the ``num_rays_per_batch`` metric) and resize the ray batch."""
        self.rays_in_last_batch = rays
        metrics["num_rays_per_batch"] = torch.tensor(rays)
        self._update_dynamic_num_rays_per_batch(rays, int(metrics["num_samples_per_batch"]))
        self._update_pixel_samplers()

    def _update_dynamic_num_rays_per_batch(self, rays: int, num_samples: int) -> None:  # type: ignore[override]
        """Size the ray batch so ``rays`` rays that marched ``num_samples`` samples would march
        ``target_num_samples`` (kept within ``[64, max_num_rays_per_batch]``), then to a size the
        datamanager's pixel sampler draws exactly (even for photos of different sizes, whole patches). From
        the batch's own ray count, not the size last asked for: with prefetched batches the two differ."""
        assert self.config.target_num_samples is not None and self.config.max_num_rays_per_batch is not None
        wanted = rays * self.config.target_num_samples / max(num_samples, 1)
        wanted = int(min(max(wanted, 64), self.config.max_num_rays_per_batch))
        self.dynamic_num_rays_per_batch = self.datamanager.valid_num_rays_per_batch(wanted)

"""AccelPipeline: nerfstudio's dynamic-batch pipeline for accel models, with the set-up they need.

:meth:`AccelPipelineConfig.resolve` runs once, before nerfstudio writes config.yml: it checks the scene folder
(:func:`~nerfstudio_accel.data.scene_checks.check_scene`: one line naming the problem instead of a parser's
stack trace), keeps the alpha channel of RGBA images for models that blend their own background
(nerfstudio's blender parser bakes white into it by default), fills the device-dependent batch sizes and
resolves the model's config from the device and the scene (its training pixels counted at the data manager's
image scale), and records which scene it is (its absolute path and camera-file fingerprint, read by a later
run's warm start). Nothing here reads an image while the pipeline is built, so nerfstudio's tools
(``ns-render``'s inference mode) work from config.yml and a checkpoint alone.

During training it sizes the ray batch so each step marches about ``target_num_samples`` samples.

Under torch.distributed (``--machine.num-devices N``) the model is not wrapped in DDP: rank 0's weights
and buffers are broadcast once, and the trainer averages gradients after each backward
(:mod:`nerfstudio_accel.distributed`). Each rank draws its own rays and sizes its own ray batch. A split scene
trained one block per rank instead draws the same rays on every rank (docs/spatial_blocks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Tuple, Type

import torch
import tyro
from jaxtyping import Float, Int
from nerfstudio.data.datamanagers.base_datamanager import VanillaDataManagerConfig
from nerfstudio.pipelines.dynamic_batch import DynamicBatchPipeline, DynamicBatchPipelineConfig
from torch import Tensor

from nerfstudio_accel import distributed
from nerfstudio_accel.data import scene_identity
from nerfstudio_accel.data.prefetching_datamanager import AccelDataManager, AccelDataManagerConfig
from nerfstudio_accel.data.scene_checks import SceneFacts, check_scene
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.models.base import AccelModel, AccelModelConfig
from nerfstudio_accel.spatial import block_ranks
from nerfstudio_accel.step_phases import phase

HardSampleBatch = Tuple[Int[Tensor, " B"], Float[Tensor, "B 3"], int, Int[Tensor, " b"]]
"""A mined batch for the viewer: ``(ray_indices (B,), positions (B, 3), n_rays, hard indices (b,))``."""


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
    spatial_blocks: int = 1
    """Spatial segmentation: cut the scene box into this many disjoint cells (a k-d split), each with its own field
    (hashed levels 2^-floor(log2 K) the rows of one model's) and sampler, every ray composited front to back over
    the cells it crosses; 1: one model (docs/spatial_blocks.md)."""
    scene_path: tyro.conf.Suppress[Optional[str]] = None
    """Set by :meth:`resolve`: the scene folder's absolute path, for a later warm start (docs/warm_start.md)."""
    scene_fingerprint: tyro.conf.Suppress[Optional[str]] = None
    """Set by :meth:`resolve`: :func:`~nerfstudio_accel.data.scene_identity.scene_fingerprint` of the scene."""

    def resolve(self, device_type: str, eval_split: str = "val") -> SceneFacts:
        """Check the scene folder (training and ``eval_split`` views), then fill every unset choice for
        ``device_type`` and the scene, the model's too (a CPU step costs ~100x a GPU step per sample), in
        place; returns what the check learned of the scene. Raises :class:`~nerfstudio_accel.errors.AccelError`
        (one line). Idempotent."""
        if not isinstance(self.model, AccelModelConfig):
            raise ConfigError(f"{type(self).__name__} trains accel models only, not {type(self.model).__name__}")
        parser = self.datamanager.dataparser
        scene = check_scene(self.scene_data_path(), parser, eval_split)
        if isinstance(self.datamanager, VanillaDataManagerConfig):
            scene = scene.at_image_scale(self.datamanager.camera_res_scale_factor)
        if self.model.reads_alpha() and getattr(parser, "alpha_color", None) is not None:
            parser.alpha_color = None  # keep RGBA: the model blends the background into prediction and target alike
        on_cuda = device_type == "cuda"
        if self.target_num_samples is None:
            self.target_num_samples = 1 << 18 if on_cuda else 1 << 14
        if self.max_num_rays_per_batch is None:
            self.max_num_rays_per_batch = 1 << 16 if on_cuda else 1 << 12
        if isinstance(self.datamanager, AccelDataManagerConfig):
            self.datamanager.resolve(device_type)
        self.model.spatial_blocks = self.spatial_blocks
        self.model.resolve(device_type, scene)
        self._check_error_guided_rays()
        self.scene_path = str(self.scene_data_path().resolve())
        self.scene_fingerprint = scene_identity.scene_fingerprint(self.scene_data_path())
        return scene

    def _check_error_guided_rays(self) -> None:
        """Raise :class:`~nerfstudio_accel.errors.ConfigError` (one line) where error-guided rays are asked for
        and cannot work: values out of range, a model that does not weigh rays, a split scene."""
        if not isinstance(self.datamanager, AccelDataManagerConfig) or not self.datamanager.error_guided_rays.enabled:
            return
        self.datamanager.error_guided_rays.check()
        flag = "--pipeline.datamanager.error-guided-rays.enabled"
        if not self.model.weighs_rays():
            model = type(self.model).__name__.removesuffix("Config")
            raise ConfigError(f"{flag}: {model} does not weigh its rays' losses; leave it off")
        if self.spatial_blocks != 1:
            raise ConfigError(f"{flag} draws one model's rays; with --pipeline.spatial-blocks above 1 leave it off")

    def scene_data_path(self) -> Path:
        """The scene folder the data manager will read (``--data`` wins over the parser's own)."""
        return Path(self.datamanager.data or self.datamanager.dataparser.data)


class AccelPipeline(DynamicBatchPipeline):
    """nerfstudio pipeline for accel methods (see module docstring)."""

    config: AccelPipelineConfig
    datamanager: AccelDataManager
    model: AccelModel

    def __init__(
        self,
        config: AccelPipelineConfig,
        device: str,
        test_mode: Literal["test", "val", "inference"] = "val",
        world_size: int = 1,
        local_rank: int = 0,
        grad_scaler: Optional[torch.cuda.amp.GradScaler] = None,
    ):
        config.model.require_resolved()
        # world_size 1: no DDP wrapper (nerfstudio's is CUDA-only and bypassed by hard mining); see the module docstring
        super().__init__(config, device, test_mode, 1, local_rank, grad_scaler)
        if not isinstance(self.datamanager, AccelDataManager):
            raise ConfigError(f"{type(self).__name__} needs an AccelDataManager, not {type(self.datamanager).__name__}")
        self.world_size, self.local_rank = world_size, local_rank
        if self.model.rank_owned_parameters() is None:
            distributed.broadcast_state(self.model)
        else:  # one block per rank: each block starts from its own seed (AccelNGPModel); the rest from rank 0
            distributed.broadcast_state(self.model, shared=lambda name: block_ranks.block_of(name) is None)
        self.rays_in_last_batch = 0
        """Rays of the batch the last training step trained on (the trainer weights this rank's gradient by it)."""

    # --- what the trainer and the viewer's Accel panel read -----------------------------------------

    def mines_hard_samples(self) -> bool:
        """Whether training steps mine hard samples (a pipeline that mines overrides this)."""
        return False

    def keep_hard_samples(self, keep: bool) -> None:
        """Keep (or drop and stop keeping) the last mined batch for :meth:`hard_samples`."""

    def hard_samples(self) -> Optional[HardSampleBatch]:
        """The last mined batch while :meth:`keep_hard_samples` is on, else None."""
        return None

    def get_train_loss_dict(self, step: int, timed: bool = False):
        """One training batch through the model: ``(outputs, loss_dict, metrics)``; the ray batch then scales
        toward ``target_num_samples`` for the steps to come. ``timed``: the trainer logs this step (a
        pipeline may add timings that wait for the device)."""
        with phase("ray batch"):
            ray_bundle, batch = self.datamanager.next_train(step)
        outputs, loss_dict, metrics = self.batch_loss(ray_bundle, batch, timed)
        if self.datamanager.error_map is not None:
            self.datamanager.error_map.record(batch["indices"], self.model.ray_errors(outputs, batch))
        self._after_training_batch(len(ray_bundle), metrics)
        return outputs, loss_dict, metrics

    def batch_loss(self, ray_bundle, batch, timed: bool = False):
        """The training loss of one given batch: ``(outputs, loss_dict, metrics)``, nothing drawn or resized."""
        outputs = self.model(ray_bundle)
        with phase("render and loss"):
            metrics = self.model.get_metrics_dict(outputs, batch)
            loss_dict = self.model.get_loss_dict(outputs, batch, metrics)
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

"""The contract of an accel model: a config resolved once, and the three seams hard sample mining drives.

- :class:`AccelModelConfig` fills every ``auto`` and device-dependent choice in :meth:`~AccelModelConfig.resolve`,
  called once, before nerfstudio writes ``config.yml`` (ns-train through AccelTrainerConfig, other callers
  through :func:`~nerfstudio_accel.engine.build.build_trainer_config`); a model only asserts it was.
- :class:`AccelModel` splits a forward into :meth:`~AccelModel.sample` (rays -> samples),
  :meth:`~AccelModel.field_raw` (samples -> pre-activation density and colour) and :meth:`~AccelModel.render`
  (raw outputs -> activated, composited pixels), plus a no-grad :meth:`~AccelModel.sample_and_forward`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple, TypeVar

import torch
import tyro
from jaxtyping import Float, Int
from nerfstudio.cameras.rays import RayBundle
from nerfstudio.models.base_model import Model, ModelConfig
from torch import Tensor
from torch.nn import Parameter
from torch.utils.checkpoint import checkpoint

from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.sampling.base import Sampler
from nerfstudio_accel.step_phases import phase


class Samples(Protocol):
    """What the seams pass between them: ``n_samples`` samples of ``n_rays`` rays, flat."""

    @property
    def n_rays(self) -> int: ...

    @property
    def ray_indices(self) -> Int[Tensor, " n_samples"]: ...

    @property
    def positions(self) -> Float[Tensor, "n_samples 3"]: ...

    def subset(self, index: Int[Tensor, " m"]) -> "Samples":
        """The samples at flat ``index``, same rays."""


@dataclass
class AccelModelConfig(ModelConfig):
    """A nerfstudio model config whose ``auto`` choices are resolved once, before training saves it."""

    resolved: tyro.conf.Suppress[bool] = False
    """Set by :meth:`resolve`; a config.yml without it predates this contract and is refused."""
    gradient_checkpointing: bool = False
    """Recompute the main field's activations in backward instead of keeping them (``torch.utils.checkpoint``):
    a step's graph memory falls and its time rises; for big batches on small GPUs. tiny-cuda-nn keeps its own
    activations outside autograd's saved tensors, so with tcnn MLPs little is freed (docs/gradient_checkpointing.md)."""
    spatial_blocks: tyro.conf.Suppress[int] = 1
    """Set from ``--pipeline.spatial-blocks``: cells the scene is split into, one field and sampler each."""
    init_from: Optional[Path] = None
    """Warm start: a run folder or .ckpt whose tensors this run starts from, networks always, the hash grid and
    other scene tensors only when that run trained on the same scene (its camera files); a fresh optimizer
    (docs/warm_start.md)."""

    def resolve(self, device_type: str, scene: SceneFacts) -> None:
        """Fill every ``auto`` and unset choice for ``device_type`` (``cuda``, ``cpu``, ``mps``) and the
        scene, in place, and refuse explicit choices that cannot run there (raises
        :class:`~nerfstudio_accel.errors.AccelError`). Idempotent."""
        self._resolve(device_type, scene)
        self.check_spatial_blocks()
        self.resolved = True

    def _resolve(self, device_type: str, scene: SceneFacts) -> None:
        """The model's own resolution (see :meth:`resolve`)."""

    def require_resolved(self) -> None:
        """Raise :class:`~nerfstudio_accel.errors.ConfigError` unless :meth:`resolve` ran."""
        if not self.resolved:
            raise ConfigError(
                f"this {type(self).__name__} was never resolved: a config.yml written before nerfstudio-accel resolved "
                f"its choices, or a config opened without training; retrain with ns-train, or call "
                f"AccelTrainerConfig.resolve() first"
            )

    def check_spatial_blocks(self) -> None:
        """Raise :class:`~nerfstudio_accel.errors.ConfigError` (one line) unless this resolved config can train
        :attr:`spatial_blocks` cells; a model without spatial segmentation takes 1."""
        if self.spatial_blocks != 1:
            raise ConfigError(
                f"--pipeline.spatial-blocks {self.spatial_blocks}: {type(self).__name__} has no spatial "
                f"segmentation yet; train it with 1 block"
            )

    def reads_alpha(self) -> bool:
        """Whether the model blends its own background into RGBA images (the data parser keeps alpha)."""
        return False

    def weighs_rays(self) -> bool:
        """Whether the model's colour loss multiplies each ray by the batch's ``ray_weights`` and its
        :meth:`AccelModel.ray_errors` gives each ray's squared error (error-guided ray sampling needs both)."""
        return False

    def runs_numba_kernels(self) -> bool:
        """Whether this resolved config trains through this package's numba kernels (on the CPU), whose threads
        PyTorch's spinning OpenMP threads slow down (:mod:`~nerfstudio_accel.openmp_wait`)."""
        return False

    def hard_mining_pays(self, device_type: str, scene: SceneFacts) -> bool:
        """Whether hard sample mining measured ahead of ordinary training at equal time for this resolved
        config on ``device_type`` and this kind of ``scene``: ``--pipeline.hard-mining auto`` follows it
        (docs/hard_mining.md). Each model answers from its own measurements."""
        raise NotImplementedError(f"{type(self).__name__} does not say whether hard mining pays")

    def uses_tcnn(self) -> bool:
        """Whether the model runs tiny-cuda-nn kernels, which compute in fp16 whatever the autocast."""
        return False


T = TypeVar("T")


class AccelModel(Model, ABC):
    """A nerfstudio model behind the seams (see the module docstring)."""

    config: AccelModelConfig

    def populate_modules(self) -> None:
        self.config.require_resolved()
        super().populate_modules()

    @abstractmethod
    def sample(self, ray_bundle: RayBundle) -> Samples:
        """Samples of the rays (with the samplers' own graph, if they learn, when grad is on)."""

    @abstractmethod
    def field_raw(self, samples: Samples) -> Tuple[Float[Tensor, "n 1"], Float[Tensor, "n 3"]]:
        """Pre-activation density and colour of every sample, with the field's graph when grad is on."""

    @abstractmethod
    def render(
        self, samples: Samples, raw_density: Float[Tensor, "n 1"], raw_color: Float[Tensor, "n 3"]
    ) -> Dict[str, Tensor]:
        """The outputs of ``get_outputs`` from raw outputs: activations, compositing, sampler losses in training."""

    def field_forward(self, forward: Callable[..., T], *args: Any) -> T:
        """``forward(*args)``, the main field's graph pass; with ``--pipeline.model.gradient-checkpointing``
        and a graph being built, its activations are recomputed in backward instead of kept."""
        if self.config.gradient_checkpointing and torch.is_grad_enabled():
            return checkpoint(forward, *args, use_reentrant=False)
        return forward(*args)

    def sample_and_forward(self, ray_bundle: RayBundle) -> Tuple[Samples, Float[Tensor, "n 1"], Float[Tensor, "n 3"]]:
        """:meth:`sample` and :meth:`field_raw` of every sample, the field without a graph: the forward
        hard sample mining scores. A model may share work between the two."""
        samples = self.sample(ray_bundle)
        with torch.no_grad(), phase("scoring forward"):
            return (samples, *self.field_raw(samples))

    def ray_errors(self, outputs: Dict[str, Tensor], batch: Dict[str, Tensor]) -> Float[Tensor, " R"]:
        """Each training ray's squared colour error, averaged over channels, without a graph (for a model whose
        config :meth:`~AccelModelConfig.weighs_rays`)."""
        raise NotImplementedError(f"{type(self).__name__} does not give per-ray errors")

    def rank_owned_parameters(self) -> Optional[List[Parameter]]:
        """Training one block of a split scene per rank: the parameters this rank alone holds and updates (its
        block's); None when every rank holds the whole model (one process, or data-parallel ranks)."""
        return None

    def own_sampler(self) -> Optional[Sampler]:
        """The model's :class:`~nerfstudio_accel.sampling.base.Sampler`; None where it samples another way."""
        return None

    def sampling_figures(self) -> Dict[str, float]:
        """Figures of the last training step's sampling for the viewer (reading them waits for the device)."""
        sampler = self.own_sampler()
        return sampler.figures() if sampler is not None else {}

"""Error-guided ray sampling: training pixels drawn in proportion to an error map kept from past steps' losses.

Each training image is cut into tiles (at most ``cells`` per side). A tile keeps a running error: after
each step, every tile the batch drew from moves ``rate`` of the way toward the mean squared error of its
rays. Pixels are drawn tile first, tile ``t`` with probability ``q_t = (1 - u) e_t / sum(e) + u n_t / N``
(``n_t`` pixels in the tile, ``N`` in all images, ``u`` the uniform share), then uniformly inside it. Each
ray carries the weight ``n_t / (N q_t)`` (at most ``1 / u``) that its colour loss is multiplied by, so the
expected colour loss is the uniform draw's: the map changes which pixels are seen often, not what the colour
loss asks for. (A sampler's own losses, the proposal sampler's, and the training PSNR are still plain means
over the drawn rays.)
Tiles start at error 1 (above any colour's squared error), so unseen tiles are drawn first.

The training step writes the map; the batch producer thread reads it. Batch ``k`` draws from the map as
it stood after step ``v = R floor((k - lag) / R)`` (``R`` = ``refresh_steps``, ``lag`` = prefetch depth +
1, the last step a producer that far ahead is sure to find finished), waiting for it if need be: the
batches are a function of the seed and of training, not of how the threads interleave. The map is not
saved in checkpoints; a resumed run starts it afresh.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Dict, Tuple

import torch
from jaxtyping import Float, Int
from torch import Tensor

from nerfstudio_accel.errors import ConfigError


@dataclass
class ErrorGuidedRaysConfig:
    """``--pipeline.datamanager.error-guided-rays.*``: draw training rays where past losses were high."""

    enabled: bool = False
    """Draw training pixels in proportion to a per-tile error map instead of uniformly (the loss is reweighted
    to stay unbiased)."""
    cells: int = 64
    """Tiles per image side, at most (each tile at least one pixel)."""
    uniform_share: float = 0.5
    """Share of each draw that stays uniform over all pixels, in (0, 1]: bounds a ray's loss weight by its inverse."""
    rate: float = 0.5
    """How far a drawn tile's error moves toward its rays' mean squared error each step, in (0, 1]."""
    refresh_steps: int = 16
    """Steps between rebuilds of the draw distribution."""

    def check(self) -> None:
        """Raise :class:`~nerfstudio_accel.errors.ConfigError` (one line) for values out of range."""
        flag = "--pipeline.datamanager.error-guided-rays"
        if self.cells < 1:
            raise ConfigError(f"{flag}.cells must be at least 1, got {self.cells}")
        if not 0.0 < self.uniform_share <= 1.0:
            raise ConfigError(f"{flag}.uniform-share must be in (0, 1], got {self.uniform_share}")
        if not 0.0 < self.rate <= 1.0:
            raise ConfigError(f"{flag}.rate must be in (0, 1], got {self.rate}")
        if self.refresh_steps < 1:
            raise ConfigError(f"{flag}.refresh-steps must be at least 1, got {self.refresh_steps}")


Distribution = Tuple[Float[Tensor, " T"], Float[Tensor, " T"]]
"""``(cumulative, probability)`` over the ``T`` tiles: float64 running sums, and each tile's ``q_t``."""


class PixelErrorMap:
    """The per-tile error map of ``num_images`` images of ``height x width`` pixels (see the module
    docstring); ``lag`` is the prefetch depth + 1. :meth:`draw` runs on the producer thread, :meth:`record`
    on the training thread; :meth:`close` wakes a producer waiting for a step that will not come."""

    wait_seconds = 600.0
    """How long :meth:`draw` waits for a step's errors before it says none are being recorded."""

    def __init__(self, config: ErrorGuidedRaysConfig, num_images: int, height: int, width: int, lag: int) -> None:
        config.check()
        self.config = config
        self.num_images, self.height, self.width, self.lag = num_images, height, width, lag
        self.tile_height = math.ceil(height / min(config.cells, height))
        self.tile_width = math.ceil(width / min(config.cells, width))
        self.tile_rows = math.ceil(height / self.tile_height)
        self.tile_columns = math.ceil(width / self.tile_width)
        rows = torch.clamp(height - torch.arange(self.tile_rows) * self.tile_height, max=self.tile_height)
        columns = torch.clamp(width - torch.arange(self.tile_columns) * self.tile_width, max=self.tile_width)
        self.tile_pixels = (rows[:, None] * columns[None, :]).flatten().repeat(num_images).double()
        """``(T,)`` pixels in each tile, image-major, row-major within an image."""
        self.errors = torch.ones(self.tile_pixels.numel())
        """``(T,)`` each tile's running mean squared error."""
        self._published: Dict[int, Distribution] = {0: self._distribution()}
        self._recorded = 0
        self._drawn = 0
        self._closed = False
        self._condition = threading.Condition()

    @property
    def num_tiles(self) -> int:
        return self.errors.numel()

    def tiles_of(self, indices: Int[Tensor, "n 3"]) -> Int[Tensor, " n"]:
        """The tile of each pixel ``(image, row, column)``."""
        image, row, column = indices.long().cpu().unbind(-1)
        tile_row, tile_column = row // self.tile_height, column // self.tile_width
        return (image * self.tile_rows + tile_row) * self.tile_columns + tile_column

    def _distribution(self) -> Distribution:
        errors = self.errors.double()
        share = self.config.uniform_share
        probability = (1.0 - share) * errors / errors.sum().clamp(
            min=1e-30
        ) + share * self.tile_pixels / self.tile_pixels.sum()
        probability = probability / probability.sum()  # all-zero errors: the uniform share alone
        return torch.cumsum(probability, 0), probability

    def record(self, indices: Int[Tensor, "n 3"], errors: Float[Tensor, " n"]) -> None:
        """After a training step: move the tiles of its pixels ``indices`` toward their rays' squared
        ``errors`` (a step with a non-finite error moves none), then count the step (and publish the draw
        distribution every ``refresh_steps`` steps)."""
        errors = errors.detach().float().cpu()
        if errors.numel() and bool(torch.isfinite(errors).all()):
            tiles = self.tiles_of(indices)
            sums = torch.zeros_like(self.errors).index_add_(0, tiles, errors)
            hits = torch.bincount(tiles, minlength=self.num_tiles)
            hit = hits > 0
            self.errors[hit] += self.config.rate * (sums[hit] / hits[hit] - self.errors[hit])
        with self._condition:
            self._recorded += 1
            if self._recorded % self.config.refresh_steps == 0:
                self._published[self._recorded] = self._distribution()
                self._condition.notify_all()

    def _distribution_for_next_batch(self) -> Distribution:
        refresh = self.config.refresh_steps
        version = max(0, self._drawn - self.lag) // refresh * refresh
        self._drawn += 1
        with self._condition:
            ready = self._condition.wait_for(lambda: self._closed or version in self._published, self.wait_seconds)
            if self._closed:
                raise RuntimeError("the error map was closed")
            if not ready:
                raise RuntimeError(
                    f"error-guided rays waited {self.wait_seconds:.0f} s for step {version}'s errors: nothing records "
                    "them (the pipeline must be an AccelPipeline)"
                )
            for old in [key for key in self._published if key < version]:
                del self._published[old]
            return self._published[version]

    def draw(self, count: int, generator: torch.Generator) -> Tuple[Int[Tensor, "count 3"], Float[Tensor, " count"]]:
        """The next batch's ``count`` pixels ``(image, row, column)`` and their loss weights, on the CPU,
        from ``generator``."""
        cumulative, probability = self._distribution_for_next_batch()
        draws = torch.rand((3, count), generator=generator, dtype=torch.float64)
        tiles = torch.searchsorted(cumulative, draws[0] * cumulative[-1], right=True).clamp(max=self.num_tiles - 1)
        per_image = self.tile_rows * self.tile_columns
        image, within = tiles // per_image, tiles % per_image
        first_row = within // self.tile_columns * self.tile_height
        first_column = within % self.tile_columns * self.tile_width
        rows = first_row + (draws[1] * (self.height - first_row).clamp(max=self.tile_height)).long()
        columns = first_column + (draws[2] * (self.width - first_column).clamp(max=self.tile_width)).long()
        weights = self.tile_pixels[tiles] / (self.tile_pixels.sum() * probability[tiles])
        return torch.stack((image, rows, columns), dim=-1), weights.float()

    def close(self) -> None:
        """Wake a producer waiting in :meth:`draw`; draws fail from now on."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

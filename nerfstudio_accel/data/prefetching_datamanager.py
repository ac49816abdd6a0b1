"""A pipelined input sampler: training batches prepared on a producer thread while the step runs.

Each training step needs a batch of rays: pixel indices drawn over the training images, the ground-truth
pixels gathered, rays generated from the cameras (with lens undistortion for captured scenes). nerfstudio
does this on the training thread, between steps, so the step waits for it. With
``--pipeline.datamanager.prefetch-batches K`` a producer thread keeps up to ``K`` batches queued (and a
finished one waiting for room). On CUDA
it works on a side stream: the ground truth goes through pinned memory with a non-blocking copy, and
the step's stream waits on the batch's event before using it.

A thread, not a process: the work is torch ops that release the GIL, the batches stay in this process
(no pickling or shared-memory copies of every batch) and the thread can use this process's CUDA context.
The batch size is read when a batch is prepared, so a dynamic ray batch takes effect up to ``K + 1``
steps late.

Batches are drawn from the pixel sampler's own generator (:mod:`.seeded_pixel_sampler`; patches for
``--pipeline.datamanager.patch-size`` above 1 too), so at a fixed batch size ``K = 2`` yields exactly the
batches ``K = 0`` yields for the same seed, in the same order. (With the dynamic ray batch the sizes
differ by the lag, and so do the draws that follow; with error-guided rays, :mod:`.error_guided_rays`, each
batch reads the error map ``K + 1`` steps behind, so ``K`` changes the draws too.)
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import inspect
import queue
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Type, Union

import torch
from nerfstudio.cameras.cameras import CameraType
from nerfstudio.cameras.rays import RayBundle
from nerfstudio.data.datamanagers.base_datamanager import (
    VanillaDataManager,
    VanillaDataManagerConfig,
    variable_res_collate,
)
from nerfstudio.data.datasets.base_dataset import InputDataset
from torch import Tensor

from nerfstudio_accel.data.error_guided_rays import ErrorGuidedRaysConfig, PixelErrorMap
from nerfstudio_accel.data.pinhole_rays import PinholeRayGenerator
from nerfstudio_accel.data.seeded_pixel_sampler import (
    SeededPatchPixelSamplerConfig,
    SeededPixelSampler,
    SeededPixelSamplerConfig,
)
from nerfstudio_accel.errors import ConfigError

Batch = Tuple[RayBundle, Dict[str, Any]]


def tensors_in(value: Any) -> Iterator[Tensor]:
    """Every tensor held by ``value``: itself, or inside dicts, lists, tuples and dataclasses (RayBundle)."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from tensors_in(getattr(value, item.name))


class BatchPrefetcher:
    """Calls ``make_batch()`` on a daemon thread, keeping up to ``depth`` results queued (and one more
    finished, waiting for room). Producers still running when the interpreter exits are stopped and joined
    first: a daemon thread inside a torch op at finalization aborts the process ("terminate called without an
    active exception").

    :meth:`next` returns them in order (re-raising the producer's error, if it failed); :meth:`close`
    stops the thread and drops what is queued. On a CUDA ``device`` the producer runs on its own stream
    and :meth:`next` makes the current stream wait for the batch and marks its tensors as used there (so
    the caching allocator does not hand their memory back to the producer's stream too early)."""

    def __init__(self, make_batch: Callable[[], Any], depth: int, device: torch.device) -> None:
        if depth < 1:
            raise ValueError(f"prefetch depth must be at least 1, got {depth}")
        # a bound method is held weakly: a datamanager dropped without close() ends its producer
        self._make_batch = weakref.WeakMethod(make_batch) if inspect.ismethod(make_batch) else (lambda: make_batch)
        self._device = device
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        if self._stream is not None:  # what the training stream wrote so far (cameras, cached images) comes first
            self._stream.wait_stream(torch.cuda.current_stream(device))
        self._queue: "queue.Queue[Tuple[Any, Any, Optional[BaseException]]]" = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="accel-batch-prefetcher", daemon=True)
        self._thread.start()
        _running_prefetchers.add(self)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _produce(self) -> None:
        stream = torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()
        try:
            with stream:
                while not self._stop.is_set():
                    make_batch = self._make_batch()
                    if make_batch is None:
                        return
                    item = make_batch()
                    del make_batch  # not kept alive while waiting for room in the queue
                    event = None
                    if self._stream is not None:
                        event = torch.cuda.Event()
                        event.record(self._stream)
                    self._put((item, event, None))
        except BaseException as error:  # handed to the training thread, which raises it
            self._put((None, None, error))

    def _put(self, entry: Tuple[Any, Any, Optional[BaseException]]) -> None:
        while not self._stop.is_set() and self._make_batch() is not None:
            try:
                self._queue.put(entry, timeout=0.05)
                return
            except queue.Full:
                continue

    def next(self) -> Any:
        """The next batch, in the order they were made; waits while none is ready."""
        if self._stop.is_set():
            raise RuntimeError("the batch prefetcher was closed")
        item, event, error = self._queue.get()
        if error is not None:
            raise RuntimeError(f"preparing a training batch failed: {error}") from error
        if event is not None:
            current = torch.cuda.current_stream(self._device)
            current.wait_event(event)
            for tensor in tensors_in(item):
                if tensor.is_cuda:
                    tensor.record_stream(current)
        return item

    def close(self, timeout: float = 10.0) -> None:
        """Stop the producer and wait for it (at most ``timeout`` seconds; it finishes the batch it is on)."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout)


_running_prefetchers: "weakref.WeakSet[BatchPrefetcher]" = weakref.WeakSet()


@atexit.register
def _close_running_prefetchers() -> None:
    for prefetcher in list(_running_prefetchers):
        prefetcher.close()


@dataclass
class AccelDataManagerConfig(VanillaDataManagerConfig):
    """nerfstudio's datamanager with a pipelined input sampler and seeded pixel draws."""

    _target: Type = field(default_factory=lambda: AccelDataManager)
    prefetch_batches: Optional[int] = None
    """Training batches a producer thread prepares ahead while the step trains (0: prepare each batch on
    the training thread, between steps, as nerfstudio does). Default 0 on the CPU, where the thread takes the
    step's cores (docs/distributed.md), 2 on other devices."""
    pixel_sampler: SeededPixelSamplerConfig = field(default_factory=SeededPixelSamplerConfig)
    error_guided_rays: ErrorGuidedRaysConfig = field(default_factory=ErrorGuidedRaysConfig)
    """Draw training rays in proportion to an error map of past losses (:mod:`.error_guided_rays`)."""

    def __setstate__(self, state: Dict[str, Any]) -> None:
        """A config.yml written before error-guided rays existed opens with them off."""
        self.__dict__.update(state)
        self.__dict__.setdefault("error_guided_rays", ErrorGuidedRaysConfig())

    def resolve(self, device_type: str) -> None:
        """Fill an unset ``prefetch_batches`` for ``device_type``, in place; raise
        :class:`~nerfstudio_accel.errors.ConfigError` (one line) for a negative one. Idempotent."""
        if self.prefetch_batches is None:
            self.prefetch_batches = 0 if device_type == "cpu" else 2
        if self.prefetch_batches < 0:
            raise ConfigError(f"--pipeline.datamanager.prefetch-batches must be 0 or more, got {self.prefetch_batches}")


@contextlib.contextmanager
def loader_worker_count_quiet() -> Iterator[None]:
    """Without torch's warning, printed on every run on a machine of fewer than 4 cores, that nerfstudio's image
    loaders ask for 4 worker processes a rank: caching every image (nerfstudio's default), they never start one."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="This DataLoader will create .* worker processes", category=UserWarning
        )
        yield


class AccelDataManager(VanillaDataManager):
    """See the module docstring. Also records, for the trainer, the rays of the batch just handed out and
    how long the step waited for it, and gives every dataset's cameras a metadata dict (``ns-export cameras``
    asserts one where the model has a camera optimizer)."""

    config: AccelDataManagerConfig

    def __init__(
        self, config: AccelDataManagerConfig, device: Union[torch.device, str] = "cpu", *args, **kwargs
    ) -> None:
        config.resolve(torch.device(device).type)
        super().__init__(config, device, *args, **kwargs)
        for dataset in (self.train_dataset, self.eval_dataset):
            if dataset is not None and dataset.cameras.metadata is None:
                # blender-data leaves none; ns-export cameras writes each camera's index into it
                dataset.cameras.metadata = {}
        self._prefetcher: Optional[BatchPrefetcher] = None
        self.last_wait_seconds = 0.0
        """How long the last :meth:`next_train` call took: the time the step waited for its batch."""
        self._rays_per_rank: Optional[float] = None
        self.error_map: Optional[PixelErrorMap] = None
        """The error map training rays are drawn from; None when they are drawn uniformly."""
        if config.error_guided_rays.enabled and self.train_dataset is not None and self.test_mode != "inference":
            self.error_map = self._error_map()

    def setup_train(self) -> None:
        """nerfstudio's, with rays of undistorted pinhole cameras generated in a few ops (:mod:`.pinhole_rays`)."""
        with loader_worker_count_quiet():
            super().setup_train()
        self.train_ray_generator = PinholeRayGenerator(self.train_ray_generator.cameras)

    def setup_eval(self) -> None:
        """nerfstudio's, with :mod:`.pinhole_rays` as in :meth:`setup_train`."""
        with loader_worker_count_quiet():
            super().setup_eval()
        self.eval_ray_generator = PinholeRayGenerator(self.eval_ray_generator.cameras)

    def _error_map(self) -> PixelErrorMap:
        """An error map over the training images, once the scene is checked to suit it (one size, every image
        in the cached batch, pinhole cameras, no masks, single pixels)."""
        flag = "--pipeline.datamanager.error-guided-rays.enabled"
        dataset = self.train_dataset
        cameras = dataset.cameras
        heights, widths = cameras.height.unique(), cameras.width.unique()
        reason = None
        if self.config.patch_size > 1:
            reason = "it draws single pixels, not patches (--pipeline.datamanager.patch-size 1)"
        elif heights.numel() > 1 or widths.numel() > 1:
            reason = "the training images differ in size"
        elif -1 < self.config.train_num_images_to_sample_from < len(dataset):
            reason = "it draws over every training image (--pipeline.datamanager.train-num-images-to-sample-from -1)"
        elif bool((cameras.camera_type != CameraType.PERSPECTIVE.value).any()):
            reason = "it draws over whole pinhole images, and this scene has fisheye or equirectangular cameras"
        elif dataset._dataparser_outputs.mask_filenames is not None:
            reason = "it draws over whole images, and this scene has masks"
        if reason is not None:
            raise ConfigError(f"{flag} does not suit this run: {reason}; leave it off")
        return PixelErrorMap(
            self.config.error_guided_rays, len(dataset), int(heights), int(widths), self.config.prefetch_batches + 1
        )

    def _get_pixel_sampler(self, dataset: InputDataset, num_rays_per_batch: int) -> SeededPixelSampler:
        """nerfstudio's choice of sampler for ``dataset``, seeded: patches for
        ``--pipeline.datamanager.patch-size`` above 1 (nerfstudio takes them only when its config is exactly its
        own pixel sampler's), else the configured sampler with the cameras' equirectangular or fisheye
        sampling. Told how the images reach it: stacked, or as lists of different sizes (nerfstudio's
        ``variable_res_collate``), and how many images each image batch holds."""
        cached = (
            self.config.train_num_images_to_sample_from
            if dataset is self.train_dataset
            else self.config.eval_num_images_to_sample_from
        )
        layout = {
            "variable_resolution": self.config.collate_fn is variable_res_collate,
            "images_per_batch": len(dataset)
            if cached == -1 or cached >= len(dataset)
            else cached,  # as CacheDataloader
        }
        if self.config.patch_size > 1:
            return SeededPatchPixelSamplerConfig(patch_size=self.config.patch_size).setup(
                num_rays_per_batch=num_rays_per_batch, **layout
            )
        cameras = dataset.cameras
        return self.config.pixel_sampler.setup(
            num_rays_per_batch=num_rays_per_batch,
            is_equirectangular=bool((cameras.camera_type == CameraType.EQUIRECTANGULAR.value).all()),
            fisheye_crop_radius=cameras.metadata.get("fisheye_crop_radius") if cameras.metadata is not None else None,
            **layout,
        )

    def valid_num_rays_per_batch(self, wanted: int) -> int:
        """The largest training batch size up to ``wanted`` that the training pixel sampler draws exactly (the
        smallest one if none is): any, whole patches, even for photos of different sizes (see
        :meth:`SeededPixelSampler.valid_num_rays_per_batch`)."""
        assert isinstance(self.train_pixel_sampler, SeededPixelSampler)
        return self.train_pixel_sampler.valid_num_rays_per_batch(wanted)

    def _prepare_train_batch(self) -> Batch:
        """One training batch: pixels drawn, ground truth gathered (pinned and copied without blocking on
        CUDA), rays generated."""
        image_batch = next(self.iter_train_image_dataloader)
        assert self.train_pixel_sampler is not None and isinstance(image_batch, dict)
        if self.error_map is None:
            batch = self.train_pixel_sampler.sample(image_batch)
        else:
            batch = self._error_guided_pixels(image_batch)
        device = torch.device(self.device)
        if device.type == "cuda" and self.config.prefetch_batches > 0:
            batch = {
                key: value.pin_memory().to(device, non_blocking=True)
                if isinstance(value, Tensor) and not value.is_cuda
                else value
                for key, value in batch.items()
            }
        return self.train_ray_generator(batch["indices"]), batch

    def _error_guided_pixels(self, image_batch: Dict[str, Any]) -> Dict[str, Tensor]:
        """The pixel batch :attr:`error_map` draws (with the pixel sampler's generator and batch size): each key
        of ``image_batch`` at the pixels, their ``indices`` ``(R, 3)`` and ``ray_weights`` ``(R,)``."""
        assert self.error_map is not None and isinstance(self.train_pixel_sampler, SeededPixelSampler)
        sampler = self.train_pixel_sampler
        indices, weights = self.error_map.draw(sampler.num_rays_per_batch, sampler.generator)
        image_positions = torch.empty(self.error_map.num_images, dtype=torch.long)
        image_positions[image_batch["image_idx"].cpu()] = torch.arange(len(image_batch["image_idx"]))
        image, row, column = indices.unbind(-1)
        batch = {
            key: value[image_positions[image], row, column]
            for key, value in image_batch.items()
            if key != "image_idx" and value is not None
        }
        device = image_batch["image"].device
        return {**batch, "indices": indices.to(device), "ray_weights": weights.to(device)}

    def next_train(self, step: int) -> Batch:
        """The next training batch, from the producer thread when prefetching."""
        started = time.perf_counter()
        self.train_count += 1
        if self.config.prefetch_batches == 0:
            ray_bundle, batch = self._prepare_train_batch()
        else:
            if self._prefetcher is None:
                self._prefetcher = BatchPrefetcher(
                    self._prepare_train_batch, self.config.prefetch_batches, torch.device(self.device)
                )
            ray_bundle, batch = self._prefetcher.next()
        self.last_wait_seconds = time.perf_counter() - started
        return ray_bundle, batch

    def count_rays_per_rank(self, rays: float) -> None:
        """The trainer's count of rays per rank in the step just trained (the mean over ranks under
        torch.distributed), which nerfstudio's Train Rays / Sec multiplies by the number of ranks."""
        self._rays_per_rank = rays

    def get_train_rays_per_batch(self) -> int:
        """Rays per rank in the step just trained (:meth:`count_rays_per_rank`); before the first step, the
        pixel sampler's batch size."""
        if self._rays_per_rank is not None:
            return self._rays_per_rank  # type: ignore[return-value]
        return super().get_train_rays_per_batch()

    def close(self) -> None:
        """Stop the producer thread, if one runs (training ended or stopped)."""
        if self.error_map is not None:
            self.error_map.close()
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

"""accel-ngp: an Instant-NGP model that samples rays through one :class:`~nerfstudio_accel.sampling.base.Sampler`:
an occupancy grid (object scenes; with or without nerfacc's CUDA ops) or proposal density fields
(unbounded captures), behind one flag. It implements :class:`~nerfstudio_accel.models.base.AccelModel`'s seams;
its scoring forward reuses the culling pass's density head, so scoring costs only the colour MLP.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Literal, Optional, Tuple, Type

import torch
from jaxtyping import Float, Int
from nerfstudio.cameras.camera_optimizers import CameraOptimizerConfig
from nerfstudio.cameras.rays import RayBundle
from nerfstudio.engine.callbacks import TrainingCallback, TrainingCallbackAttributes, TrainingCallbackLocation
from nerfstudio.utils import colormaps
from torch import Tensor
from torch.nn import Parameter

from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.fields.coarse_to_fine import level_weights
from nerfstudio_accel.fields.density_normals import rendered_normals
from nerfstudio_accel.fields.density_pass_record import DensityPassRecord
from nerfstudio_accel.fields.hash_grid_field import FieldImplementation, HashGridField
from nerfstudio_accel.fields.proposal_field import ProposalDensityField
from nerfstudio_accel.geometry import pose_corrected_rays
from nerfstudio_accel.metrics import ImageMetrics
from nerfstudio_accel.models.base import AccelModel, AccelModelConfig
from nerfstudio_accel.ops.backends import (
    HashBackend,
    SamplerBackend,
    check_hash_backend,
    check_implementation,
    check_sampler_backend,
    resolve_hash_backend,
    resolve_implementation,
    resolve_sampler_backend,
    runnable_hash_backend,
)
from nerfstudio_accel.rendering import (
    BackgroundMode,
    background_colors,
    composite_ground_truth,
    depth_over_background,
    render_packed,
)
from nerfstudio_accel.sampling.base import Sampler
from nerfstudio_accel.sampling.occupancy import GridUpdateOptions, MarchingOptions, OccupancySampler
from nerfstudio_accel.sampling.packed import PackedSamples
from nerfstudio_accel.sampling.proposal import ProposalSampler
from nerfstudio_accel.step_phases import phase
from nerfstudio_accel.viewer.finished_run import FinishedRunViewer

logger = logging.getLogger(__name__)


@dataclass
class FieldSamples:
    """accel-ngp's samples between its seams: the sampler's geometry ``packed`` (on the rays before pose
    correction) and, after a culling pass, the field's no-grad position encodings of each sample
    ``(n_samples, enc)``, which it reuses as its forward values this step (None: the field encodes)."""

    packed: PackedSamples
    encodings: Optional[Float[Tensor, "n_samples enc"]] = None

    @property
    def n_rays(self) -> int:
        return self.packed.n_rays

    @property
    def ray_indices(self) -> Int[Tensor, " n_samples"]:
        return self.packed.ray_indices

    @property
    def positions(self) -> Float[Tensor, "n_samples 3"]:
        return self.packed.positions

    def subset(self, index: Int[Tensor, " m"]) -> "FieldSamples":
        """The samples at ``index`` with their encodings, same rays."""
        return FieldSamples(self.packed.subset(index), None if self.encodings is None else self.encodings[index])


@dataclass
class AutoCameraOptimizerConfig(CameraOptimizerConfig):
    """nerfstudio's camera optimizer with an ``auto`` mode, resolved from the data before the model is built."""

    mode: Literal["auto", "off", "SO3xR3", "SE3"] = "auto"  # type: ignore[assignment]
    """Pose refinement: off, SO3xR3 or SE3; auto: SO3xR3 for captures (scene contraction on), off otherwise."""


@dataclass
class AccelNGPModelConfig(AccelModelConfig):
    """accel-ngp model: hash-grid field + occupancy-grid sampling + fp32 packed rendering."""

    _target: Type = field(default_factory=lambda: AccelNGPModel)
    enable_collider: bool = False
    """The occupancy grid bounds the rays; no collider needed."""
    collider_params: Optional[Dict[str, float]] = None
    sampler_backend: SamplerBackend = "auto"
    """Ray marching: nerfacc CUDA ops (nerfacc), the fused numba marcher on CPU (kernel), the pure-PyTorch
    reference (torch); auto: nerfacc on CUDA when it loads, kernel on CPU, torch elsewhere, written into
    config.yml as the backend chosen (ns-eval elsewhere says in one line when it marches with another)."""
    sampler: Literal["auto", "occupancy", "proposal"] = "auto"
    """How rays are sampled: an occupancy grid (skips empty space, culls by opacity; object scenes) or
    proposal density fields (coarse-to-fine, num_samples per ray; unbounded captures). auto: occupancy
    without scene contraction (blender-data), proposal with it (other data); docs/captured_scenes.md
    has the benchmark behind this choice."""
    scene_contraction: Literal["auto", "on", "off"] = "auto"
    """Contract unbounded space into the grid. auto: off for blender-data, on for other data."""
    num_samples: Optional[int] = None
    """Proposal sampler: samples per ray for the main field; default 48 on CUDA (nerfacc's choice), 32
    elsewhere (more rays per CPU second; docs/captured_scenes.md)."""
    proposal_samples: Optional[Tuple[int, ...]] = None
    """Proposal sampler: samples per ray in each proposal round (one proposal field per round); default
    256 96 on CUDA, 128 64 elsewhere."""
    proposal_max_res: Tuple[int, ...] = (128, 256)
    """Proposal sampler: finest hash-grid resolution of each proposal field."""
    proposal_log2_hashmap_size: int = 17
    proposal_anneal_steps: int = 1000
    """Proposal sampler: steps over which resampling moves from uniform to the proposal weights."""
    interlevel_loss_mult: float = 1.0
    """Proposal sampler: weight of the interlevel loss that trains the proposal fields."""
    distortion_loss_mult: float = 0.0
    """Proposal sampler: weight of mip-NeRF 360's distortion loss on the main field's weights, against
    floaters (nerfacto uses 0.002); 0: off, the default, as it did not help on fruit at 300 s
    (docs/captured_scenes.md)."""
    max_samples_per_ray: Optional[int] = None
    """Occupancy sampler: a ray keeps at most this many samples in occupied cells, front to back (bounds
    the cost of a young, foggy field); default 1024 bounded, 256 contracted; 0: no cap."""
    culling_first_samples: int = 0
    """Occupancy sampler: the culling density pass reads each ray's candidates in rounds of N, N, 2N, 4N, ...,
    each only for the rays not yet opaque (the same samples are kept, fewer densities are read); 0: every
    candidate in one pass, the default, as the rounds measured slower on CPU (docs/benchmarks.md)."""
    appearance_embedding_dim: Optional[int] = None
    """Per-image appearance vector fed to the colour MLP (exposure, white balance); evaluation uses the
    mean vector. 0: none. Default 0 without scene contraction (synthetic), 32 with it (captures)."""
    camera_optimizer: AutoCameraOptimizerConfig = field(default_factory=AutoCameraOptimizerConfig)
    """Camera pose refinement (nerfstudio's camera optimizer), --pipeline.model.camera-optimizer.mode; auto:
    SO3xR3 with scene contraction (captured poses; docs/captured_scenes.md has the measurement), off without."""
    grid_resolution: Optional[int] = None
    """Occupancy grid cells per axis (per level); default 128 on CUDA, 64 elsewhere (cheaper updates).
    Like every device-dependent default here, it is written into config.yml as a number when training starts."""
    grid_levels: Optional[int] = None
    """Grid levels (each twice the extent of the last); default 1 bounded, 4 contracted."""
    render_step_size: Optional[float] = None
    """Minimum marching step in world units; default: scene-box diagonal / 1000."""
    cone_angle: Optional[float] = None
    """Steps grow as distance * cone_angle; default 0 bounded, 1/256 contracted."""
    near_plane: float = 0.05
    far_plane: float = 1e3
    alpha_threshold: float = 1e-2
    """Skip samples whose opacity is below this."""
    early_stop_eps: float = 1e-4
    """Stop marching a ray once its transmittance is below this."""
    stratified_sampling: bool = True
    """In training, shift each ray's step lattice by a random fraction of a step, so a pixel sees new
    points every step (evaluation and the viewer march the fixed lattice)."""
    grid_update_every: int = 16
    """Update the occupancy grid every this many steps."""
    grid_warmup_steps: int = 256
    """Evaluate every cell on updates until this step, then a random quarter plus occupied cells."""
    grid_ema_decay: float = 0.95
    occupancy_threshold: float = 1e-2
    """A cell is occupied when density * step exceeds min(this, mean occupancy)."""
    background: Literal["auto", "random", "white", "black"] = "auto"
    """Background behind the object: random colour per ray in training (needs alpha), white or black.
    Evaluation with random uses white. auto: random when the training images have alpha, white otherwise
    (resolved from the data before training and written into config.yml)."""
    num_levels: int = 16
    """Hash-grid levels."""
    coarse_to_fine_steps: int = 0
    """Progressive training: the finer hash-grid levels enter one after another over this many steps (their
    features ramp from 0 to 1); 0: every level from the start (docs/progressive_training.md)."""
    coarse_to_fine_start_levels: int = 4
    """Progressive training: hash-grid levels active from step 0."""
    max_res: int = 2048
    """Finest hash-grid resolution."""
    log2_hashmap_size: Optional[int] = None
    """Entries per hash-grid level, as a power of two; default 19 on CUDA, 15 elsewhere (a level's table
    then fits a CPU core's L2 cache; docs/hash_encoding.md has the measurement)."""
    hidden_dim: int = 64
    hidden_dim_color: int = 64
    implementation: FieldImplementation = "auto"
    """MLP and direction-encoding kernels: tiny-cuda-nn (tcnn) or pure PyTorch (torch); auto: tcnn on CUDA
    when tiny-cuda-nn imports, else torch. A tcnn checkpoint opens only where tiny-cuda-nn runs."""
    hash_backend: HashBackend = "auto"
    """Position encoding: fused no-compiler kernels (kernel: numba on CPU, Triton on CUDA), tiny-cuda-nn
    (tcnn) or the pure-PyTorch reference (torch); auto: tcnn where it runs, else kernel where it runs,
    else torch. All read one table layout, so checkpoints move between backends and devices."""

    def _resolve(self, device_type: str, scene: SceneFacts) -> None:
        """Scene contraction from the scene (off for object scenes), what follows from it (sampler, appearance
        embedding, per-ray cap, pose refinement), the background from the images' alpha, the sizes that
        depend on the device, and the kernels that run there; explicit choices that cannot run are refused."""
        if self.scene_contraction == "auto":
            self.scene_contraction = "off" if scene.bounded else "on"
        contract = self.scene_contraction == "on"
        if self.sampler == "auto":
            self.sampler = "proposal" if contract else "occupancy"
            logger.info(
                "accel-ngp: %s sampler (%s scene; --pipeline.model.sampler)",
                self.sampler,
                "unbounded" if contract else "bounded",
            )
        if self.appearance_embedding_dim is None:
            self.appearance_embedding_dim = 32 if contract else 0
        if self.max_samples_per_ray is None:
            self.max_samples_per_ray = 256 if contract else 1024
        if self.camera_optimizer.mode == "auto":
            self.camera_optimizer.mode = "SO3xR3" if contract else "off"
        self._resolve_background(scene.images_have_alpha)
        on_cuda = device_type == "cuda"
        if self.log2_hashmap_size is None:
            self.log2_hashmap_size = 19 if on_cuda else 15
        if self.grid_resolution is None:
            self.grid_resolution = 128 if on_cuda else 64
        if self.num_samples is None:
            self.num_samples = 48 if on_cuda else 32
        if self.proposal_samples is None:  # one count per proposal field
            counts = (256, 96) if on_cuda else (128, 64)
            self.proposal_samples = tuple(counts[min(i, 1)] for i in range(len(self.proposal_max_res)))
        if self.sampler == "proposal" and len(self.proposal_samples) != len(self.proposal_max_res):
            raise ConfigError(
                f"--pipeline.model.proposal-samples names {len(self.proposal_samples)} rounds but "
                f"--pipeline.model.proposal-max-res {len(self.proposal_max_res)}; give one resolution per round"
            )
        self.implementation = resolve_implementation(self.implementation, device_type)
        if self.hash_backend == "auto":
            self.hash_backend = resolve_hash_backend(self.hash_backend, device_type)
            logger.info(
                "accel-ngp: hash encoding backend %s on %s (--pipeline.model.hash-backend)",
                self.hash_backend,
                device_type,
            )
        check_hash_backend(self.hash_backend, device_type)
        if self.sampler_backend == "auto":  # written down: another machine's auto could march another lattice
            self.sampler_backend = resolve_sampler_backend(self.sampler_backend, device_type)
            logger.info(
                "accel-ngp: sampler backend %s on %s (--pipeline.model.sampler-backend)",
                self.sampler_backend,
                device_type,
            )
        if self.sampler == "occupancy":
            check_sampler_backend(self.sampler_backend, device_type)

    def _resolve_background(self, images_have_alpha: Optional[bool]) -> None:
        """``auto``: random with alpha, white without (or unknown); an explicit ``random`` without alpha
        becomes white, with a warning."""
        if self.background == "auto":
            self.background = "random" if images_have_alpha else "white"
        elif self.background == "random" and images_have_alpha is False:
            self.background = "white"
            logger.warning("--pipeline.model.background random needs images with alpha; these have none: using white")

    def reads_alpha(self) -> bool:
        return True

    def hard_mining_pays(self, device_type: str, scene: SceneFacts) -> bool:
        """With the occupancy sampler mining reuses the culling pass: ahead at equal time in two pairs of three,
        cheaper per step (lego, CPU). With the proposal sampler it was behind in every pair (fruit, CPU); the
        proposal fields, which mining does not shrink, weigh on a step on any device, so it is off there
        everywhere until a GPU run says otherwise."""
        return self.sampler == "occupancy"

    def uses_tcnn(self) -> bool:
        return "tcnn" in (self.implementation, self.hash_backend)


class AccelNGPModel(AccelModel):
    """Instant-NGP behind the accel seams, sampling through one :class:`~nerfstudio_accel.sampling.base.Sampler`."""

    config: AccelNGPModelConfig

    def populate_modules(self) -> None:
        super().populate_modules()
        cfg = self.config
        device = torch.device(self.kwargs.get("device", "cpu"))
        assert cfg.log2_hashmap_size is not None and cfg.grid_resolution is not None
        assert cfg.num_samples is not None and cfg.proposal_samples is not None
        check_implementation(cfg.implementation, device.type, "accel-ngp")
        contract = cfg.scene_contraction == "on"
        aabb = self.scene_box.aabb.float()
        hash_backend = runnable_hash_backend(cfg.hash_backend, device.type)
        self.field = HashGridField(
            aabb=aabb,
            contract=contract,
            num_levels=cfg.num_levels,
            max_res=cfg.max_res,
            log2_hashmap_size=cfg.log2_hashmap_size,
            hidden_dim=cfg.hidden_dim,
            hidden_dim_color=cfg.hidden_dim_color,
            implementation=cfg.implementation,
            hash_backend=hash_backend,
            num_images=self.num_train_data,
            appearance_dim=cfg.appearance_embedding_dim or 0,
        )
        self.camera_optimizer = cfg.camera_optimizer.setup(num_cameras=self.num_train_data, device="cpu")
        self.sampler = self._build_sampler(aabb, contract, hash_backend, device)
        self.image_metrics = ImageMetrics()
        self.finished_run_viewer = FinishedRunViewer()  # nerfstudio's Viewer sets it up (ns-viewer's page)
        self.update_to_step(0)

    def _build_sampler(
        self, aabb: Float[Tensor, "2 3"], contract: bool, hash_backend: str, device: torch.device
    ) -> Sampler:
        cfg = self.config
        diagonal = float(torch.linalg.norm(aabb[1] - aabb[0]))
        if cfg.sampler == "proposal":
            fields = [
                ProposalDensityField(
                    aabb,
                    contract,
                    max_res=res,
                    log2_hashmap_size=cfg.proposal_log2_hashmap_size,
                    implementation=cfg.implementation,
                    hash_backend=hash_backend,
                )
                for res in cfg.proposal_max_res
            ]
            return ProposalSampler(
                fields,
                cfg.proposal_samples,
                cfg.num_samples,
                spacing="lindisp" if contract else "linear",
                anneal_steps=cfg.proposal_anneal_steps,
                aabb=None if contract else aabb.flatten(),
                near_plane=cfg.near_plane,
                far_plane=cfg.far_plane,
                distortion=cfg.distortion_loss_mult > 0,
            )
        marching = MarchingOptions(
            render_step_size=cfg.render_step_size if cfg.render_step_size is not None else diagonal / 1000,
            cone_angle=cfg.cone_angle if cfg.cone_angle is not None else (1 / 256 if contract else 0.0),
            near_plane=cfg.near_plane,
            far_plane=cfg.far_plane,
            alpha_threshold=cfg.alpha_threshold,
            early_stop_eps=cfg.early_stop_eps,
            max_samples_per_ray=cfg.max_samples_per_ray or None,
            culling_first_samples=cfg.culling_first_samples,
        )
        grid_update = GridUpdateOptions(
            every_n_steps=cfg.grid_update_every,
            warmup_steps=cfg.grid_warmup_steps,
            ema_decay=cfg.grid_ema_decay,
            occupancy_threshold=cfg.occupancy_threshold,
        )
        levels = cfg.grid_levels if cfg.grid_levels is not None else (4 if contract else 1)
        sampler = OccupancySampler(
            aabb.flatten(),
            resolution=cfg.grid_resolution,
            levels=levels,
            backend=cfg.sampler_backend,
            marching=marching,
            grid_update=grid_update,
        )
        sampler.backend_for(device)  # resolved (and a fallback warned about) as the model opens
        return sampler

    def own_sampler(self) -> Sampler:
        return self.sampler

    @property
    def background_mode(self) -> BackgroundMode:
        """The resolved background (``random`` renders white outside training)."""
        return self.config.background  # type: ignore[return-value]

    def get_param_groups(self) -> Dict[str, List[Parameter]]:
        """The radiance field and the sampler's own fields, if any, train together; the camera optimizer has its own group."""
        groups = {"fields": list(self.field.parameters()) + list(self.sampler.parameters())}
        self.camera_optimizer.get_param_groups(param_groups=groups)
        return groups

    def get_training_callbacks(
        self, training_callback_attributes: TrainingCallbackAttributes
    ) -> List[TrainingCallback]:
        def update_sampler(step: int) -> None:
            self.update_to_step(step)
            self.sampler.update(step, self.field.density)

        return [
            TrainingCallback(
                [TrainingCallbackLocation.BEFORE_TRAIN_ITERATION], update_sampler, update_every_num_iters=1
            )
        ]

    def update_to_step(self, step: int) -> None:
        """The coarse-to-fine level weights of ``step`` (each training step, and when a checkpoint loads)."""
        layout = self.field.position_encoding.layout
        cfg = self.config
        weights = level_weights(
            step,
            layout.num_levels,
            layout.features_per_level,
            cfg.coarse_to_fine_start_levels,
            cfg.coarse_to_fine_steps,
        )
        self.field.level_weights = None if weights is None else weights.to(self.field.aabb.device)

    # --- the three seams -------------------------------------------------------------------------

    def sample(self, ray_bundle: RayBundle) -> FieldSamples:
        """The sampler's packed samples of the pose-corrected rays (the occupancy grid's without a graph, the
        proposal fields' with theirs when grad is on), on the uncorrected rays for :meth:`field_raw`, with the
        culling pass's encodings of the survivors."""
        record = DensityPassRecord(self.field, keep_heads=False)
        return FieldSamples(self._sample(ray_bundle, record)[0], record.kept_encodings())

    def _sample(
        self, ray_bundle: RayBundle, record: DensityPassRecord
    ) -> Tuple[PackedSamples, Float[Tensor, "n_rays 3"]]:
        """The samples on the uncorrected rays (a culling pass keeps its rows in ``record``) and the
        pose-corrected directions they were marched along."""
        origins, directions, cameras, nears, fars = self._rays(ray_bundle)
        with torch.no_grad():
            marched_origins, marched_directions = self._pose_corrected(origins, directions, cameras)
        samples = self.sampler.sample(marched_origins, marched_directions, nears, fars, record, self._stratified)
        return samples.on_rays(origins, directions, cameras), marched_directions

    def sample_and_forward(
        self, ray_bundle: RayBundle
    ) -> Tuple[FieldSamples, Float[Tensor, "n 1"], Float[Tensor, "n 3"]]:
        """:meth:`sample` and :meth:`field_raw` of its samples, the field without a graph (a learning sampler
        keeps its own). When the sampler culled by density, the density heads it computed are kept for the
        survivors, so only the colour MLP is added."""
        record = DensityPassRecord(self.field, keep_heads=True)
        packed, marched_directions = self._sample(ray_bundle, record)
        samples = FieldSamples(packed, record.kept_encodings())
        with torch.no_grad(), phase("scoring forward"):
            if not record.kept:
                return (samples, *self.field_raw(samples))
            kept = record.kept_heads()
            directions = marched_directions[packed.ray_indices]
            color = self.field.color_raw(kept[:, 1:], directions, packed.sample_camera_indices)
            return samples, kept[:, :1], color

    @property
    def _stratified(self) -> bool:
        """Jittered lattices in training only: evaluation and the viewer stay deterministic."""
        return self.training and self.config.stratified_sampling

    @staticmethod
    def _rays(ray_bundle: RayBundle):
        """Flat fp32 ``origins, directions (n_rays, 3)``, ``camera_indices (n_rays,)`` or None, and optional
        per-ray ``nears, fars (n_rays,)``."""
        nears = ray_bundle.nears.reshape(-1) if ray_bundle.nears is not None else None
        fars = ray_bundle.fars.reshape(-1) if ray_bundle.fars is not None else None
        cameras = ray_bundle.camera_indices.reshape(-1).long() if ray_bundle.camera_indices is not None else None
        return (
            ray_bundle.origins.reshape(-1, 3).float(),
            ray_bundle.directions.reshape(-1, 3).float(),
            cameras,
            nears,
            fars,
        )

    def _pose_corrected(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        cameras: Optional[Int[Tensor, " n_rays"]],
    ) -> Tuple[Float[Tensor, "n_rays 3"], Float[Tensor, "n_rays 3"]]:
        """Rays moved by the camera optimizer's current pose corrections, in fp32 (training with it on), else unchanged."""
        if not self.training or cameras is None or self.config.camera_optimizer.mode == "off" or origins.shape[0] == 0:
            return origins, directions
        return pose_corrected_rays(self.camera_optimizer, origins, directions, cameras)

    def field_raw(self, samples: FieldSamples) -> Tuple[Float[Tensor, "n 1"], Float[Tensor, "n 3"]]:
        """Pre-activation density and colour of each sample (through the pose corrections' graph when the
        camera optimizer is on)."""
        packed = samples.packed
        origins, directions = self._pose_corrected(packed.origins, packed.directions, packed.camera_indices)
        rays = packed.ray_indices
        positions = origins[rays] + directions[rays] * packed.t_mids[:, None]
        return self.field_forward(
            self.field.field_raw, positions, directions[rays], packed.sample_camera_indices, samples.encodings
        )

    def render(
        self, samples: FieldSamples, raw_density: Float[Tensor, "n 1"], raw_color: Float[Tensor, "n 3"]
    ) -> Dict[str, Tensor]:
        """Activations and fp32 compositing over this step's background colours; in training, also the
        sampler's own losses (the proposal fields' interlevel loss); outside training, a depth for empty rays and
        ``normals`` from the density's gradient (:mod:`~nerfstudio_accel.fields.density_normals`)."""
        packed = samples.packed
        density, color = self.field.activate(raw_density, raw_color)
        background = background_colors(self.background_mode, samples.n_rays, density.device, self.training)
        outputs = render_packed(packed, density, color, background, backend=self.sampler.backend_for(density.device))
        outputs["background"] = background
        outputs["num_samples_per_ray"] = packed.samples_per_ray().float()[
            :, None
        ]  # an image like the others: float, (n_rays, 1)
        if not self.training:
            outputs["depth"] = depth_over_background(
                outputs["depth"], outputs["accumulation"], packed.origins, self.scene_box.aabb
            )
            outputs["normals"] = rendered_normals(
                lambda points: self.field.density_head(points, samples.encodings)[:, :1],
                samples.positions,
                outputs["weights"],
                samples.ray_indices,
                samples.n_rays,
            )
        else:
            outputs.update(self.sampler.losses(packed, outputs["weights"]))
        return outputs

    # --- nerfstudio Model API --------------------------------------------------------------------

    def get_outputs(self, ray_bundle: RayBundle) -> Dict[str, Tensor]:
        if not torch.is_grad_enabled():  # evaluation and the viewer: the culling pass's density heads serve
            samples, raw_density, raw_color = self.sample_and_forward(ray_bundle)
        else:
            samples = self.sample(ray_bundle)
            with phase("graph forward"):
                raw_density, raw_color = self.field_raw(samples)
        with phase("render and loss"):
            outputs = self.render(samples, raw_density, raw_color)
        outputs.pop("weights")
        return outputs

    def get_rgba_image(self, outputs: Dict[str, Tensor], output_name: str = "rgb") -> Float[Tensor, "*batch 4"]:
        """The object's own colour and its opacity (``ns-render --rendered-output-names rgba``): the
        background this render was blended over is taken out again, ``(rgb - (1 - a) bg) / a``."""
        accumulation = outputs[output_name.replace("rgb", "accumulation")]
        foreground = outputs[output_name] - (1.0 - accumulation) * outputs["background"]
        return torch.cat([(foreground / accumulation.clamp(min=1e-10)).clamp(0.0, 1.0), accumulation], dim=-1)

    def get_metrics_dict(self, outputs: Dict[str, Tensor], batch: Dict[str, Tensor]) -> Dict[str, Tensor]:
        image = batch["image"].to(self.device)
        target = composite_ground_truth(image, outputs["background"])
        metrics = {
            "psnr": -10.0 * torch.log10(torch.mean((outputs["rgb"].detach() - target) ** 2).clamp(min=1e-10)),
            "num_samples_per_batch": outputs["num_samples_per_ray"].sum(),
            "num_samples_per_ray": outputs["num_samples_per_ray"].mean(),
        }
        self.camera_optimizer.get_metrics_dict(metrics)
        return metrics

    def get_loss_dict(
        self, outputs: Dict[str, Tensor], batch: Dict[str, Tensor], metrics_dict=None
    ) -> Dict[str, Tensor]:
        image = batch["image"].to(self.device)
        target = composite_ground_truth(image, outputs["background"])
        losses = {"rgb_loss": torch.mean((outputs["rgb"] - target) ** 2)}
        sampler_loss_mults = {
            "interlevel_loss": self.config.interlevel_loss_mult,
            "distortion_loss": self.config.distortion_loss_mult,
        }
        for name, mult in sampler_loss_mults.items():
            if name in outputs:
                losses[name] = mult * outputs[name]
        if self.training:
            self.camera_optimizer.get_loss_dict(losses)
        return losses

    def get_image_metrics_and_images(
        self, outputs: Dict[str, Tensor], batch: Dict[str, Tensor]
    ) -> Tuple[Dict[str, float], Dict[str, Tensor]]:
        image = batch["image"].to(self.device)
        height, width = image.shape[:2]
        background = background_colors(self.background_mode, height * width, image.device, training=False)
        target = composite_ground_truth(image, background.reshape(height, width, 3))
        rgb = outputs["rgb"]
        metrics = self.image_metrics(rgb, target)
        metrics["num_samples_per_ray"] = float(outputs["num_samples_per_ray"].mean())
        images = {
            "img": torch.cat([target, rgb], dim=1),
            "accumulation": colormaps.apply_colormap(outputs["accumulation"]),
            "depth": colormaps.apply_depth_colormap(outputs["depth"], accumulation=outputs["accumulation"]),
        }
        return metrics, images

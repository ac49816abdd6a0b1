"""accel-ngp: an Instant-NGP model that samples rays through one :class:`~nerfstudio_accel.sampling.base.Sampler`:
an occupancy grid (object scenes; with or without nerfacc's CUDA ops) or proposal density fields
(unbounded captures), behind one flag. It implements :class:`~nerfstudio_accel.models.base.AccelModel`'s seams;
its scoring forward reuses the culling pass's density head, so scoring costs only the colour MLP.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Type, Union

import torch
from jaxtyping import Float, Int
from nerfstudio.cameras.camera_optimizers import CameraOptimizerConfig
from nerfstudio.cameras.rays import RayBundle
from nerfstudio.engine.callbacks import TrainingCallback, TrainingCallbackAttributes, TrainingCallbackLocation
from nerfstudio.utils import colormaps
from nerfstudio.utils.rich_utils import CONSOLE
from torch import Tensor
from torch.nn import Parameter

from nerfstudio_accel import distributed
from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.fields.coarse_to_fine import level_weights
from nerfstudio_accel.fields.density_normals import rendered_normals
from nerfstudio_accel.fields.density_pass_record import DensityPassRecord
from nerfstudio_accel.fields.hash_grid_field import FieldImplementation, HashGridField, appearance_embedding
from nerfstudio_accel.geometry import pose_corrected_rays
from nerfstudio_accel.metrics import ImageMetrics
from nerfstudio_accel.models.base import AccelModel, AccelModelConfig
from nerfstudio_accel.models.table_memory import check_table_fits
from nerfstudio_accel.ops.backends import (
    HashBackend,
    check_hash_backend,
    check_implementation,
    resolve_hash_backend,
    resolve_implementation,
    runnable_hash_backend,
    runs_numba_kernels,
)
from nerfstudio_accel.renamed_flags import move_model_fields
from nerfstudio_accel.rendering import (
    BackgroundMode,
    background_colors,
    composite_ground_truth,
    depth_over_background,
    render_packed,
)
from nerfstudio_accel.sampling.base import Sampler, SamplerConfig, SamplerScene
from nerfstudio_accel.sampling.occupancy import OccupancySamplerConfig
from nerfstudio_accel.sampling.packed import PackedSamples
from nerfstudio_accel.sampling.proposal import ProposalSamplerConfig
from nerfstudio_accel.spatial import block_ranks
from nerfstudio_accel.spatial.block_composite import (
    composite_blocks,
    gather_block_renders,
    render_block,
    transmittance_in_front,
)
from nerfstudio_accel.spatial.block_field import APPEARANCE_GROUP, BlockFields
from nerfstudio_accel.spatial.block_proposal_sampler import BlockProposalSampler
from nerfstudio_accel.spatial.block_sampler import BlockSampler
from nerfstudio_accel.spatial.cell_samplers import CellSamplers
from nerfstudio_accel.spatial.cells import (
    MAX_BLOCKS,
    block_table_log2,
    contracted_region,
    kd_cells,
    unbounded_cells,
)
from nerfstudio_accel.step_phases import phase
from nerfstudio_accel.viewer.finished_run import FinishedRunViewer

logger = logging.getLogger(__name__)

RadianceField = Union[HashGridField, BlockFields]
"""One field over the scene box, or one per cell of a split scene, behind the same calls."""


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
    sampler: Literal["auto", "occupancy", "proposal"] = "auto"
    """How rays are sampled: an occupancy grid (skips empty space, culls by opacity; object scenes) or
    proposal density fields (coarse-to-fine, a fixed count per ray; unbounded captures). auto: occupancy
    without scene contraction (blender-data), proposal with it (other data); docs/captured_scenes.md
    has the benchmark behind this choice."""
    scene_contraction: Literal["auto", "on", "off"] = "auto"
    """Contract unbounded space into the grid. auto: off for blender-data, on for other data."""
    occupancy: OccupancySamplerConfig = field(default_factory=OccupancySamplerConfig)
    """The occupancy sampler's options (--pipeline.model.occupancy.*)."""
    proposal: ProposalSamplerConfig = field(default_factory=ProposalSamplerConfig)
    """The proposal sampler's options (--pipeline.model.proposal.*)."""
    appearance_embedding_dim: Optional[int] = None
    """Per-image appearance vector fed to the colour MLP (exposure, white balance); evaluation uses the
    mean vector. 0: none. Default 0 without scene contraction (synthetic), 32 with it (captures)."""
    camera_optimizer: AutoCameraOptimizerConfig = field(default_factory=AutoCameraOptimizerConfig)
    """Camera pose refinement (nerfstudio's camera optimizer), --pipeline.model.camera-optimizer.mode; auto:
    SO3xR3 with scene contraction (captured poses; docs/captured_scenes.md has the measurement), off without."""
    near_plane: float = 0.05
    far_plane: float = 1e3
    stratified_sampling: bool = True
    """In training, shift each ray's step lattice by a random fraction of a step, so a pixel sees new
    points every step (evaluation and the viewer march the fixed lattice)."""
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
    """Entries per hash-grid level, as a power of two; default 19 on CUDA, elsewhere 17 for scenes of at least
    3 M training pixels and 15 below (:func:`default_table_log2`)."""
    table_growth_step: int = 0
    """Train with half of the hash table's rows a level until this step, then lay the table out in all of them in
    place, every point reading what it read (docs/hash_encoding.md#growing-the-table-in-training); 0: all rows from
    the start (it tied with growth at step 2000 at equal time on lego 400x400, CPU)."""
    hidden_dim: int = 64
    hidden_dim_color: int = 64
    implementation: FieldImplementation = "auto"
    """MLP and direction-encoding kernels: tiny-cuda-nn (tcnn) or pure PyTorch (torch); auto: tcnn on CUDA
    when tiny-cuda-nn imports, else torch. A tcnn checkpoint opens only where tiny-cuda-nn runs."""
    hash_backend: HashBackend = "auto"
    """Position encoding: fused no-compiler kernels (kernel: numba on CPU, Triton on CUDA), tiny-cuda-nn
    (tcnn) or the pure-PyTorch reference (torch); auto: tcnn where it runs (and builds the grid: not the blocks of
    a split object scene whose dense levels outgrow their table), else kernel where it runs, else torch. All read
    one table layout, so checkpoints move between backends and devices."""

    def _resolve(self, device_type: str, scene: SceneFacts) -> None:
        """Scene contraction from the scene (off for object scenes), what follows from it (sampler, appearance
        embedding, pose refinement), the background from the images' alpha, the hash table's size for the
        device, the kernels that run there, and the chosen sampler's own options
        (:meth:`~nerfstudio_accel.sampling.base.SamplerConfig.resolve`); explicit choices that cannot run are refused."""
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
        if self.camera_optimizer.mode == "auto":
            self.camera_optimizer.mode = "SO3xR3" if contract else "off"
        self._resolve_background(scene.images_have_alpha)
        if self.log2_hashmap_size is None:
            self.log2_hashmap_size = default_table_log2(device_type, scene)
            pixels = "an unknown number of" if scene.train_pixels is None else f"{scene.train_pixels / 1e6:.1f} M"
            CONSOLE.print(
                f"Hash table: 2^{self.log2_hashmap_size} rows per level, auto for {pixels} training pixels on "
                f"{device_type} (docs/hash_encoding.md; --pipeline.model.log2-hashmap-size to choose)"
            )
        check_table_fits(self.num_levels, self.max_res, self.log2_hashmap_size, device_type)
        self.implementation = resolve_implementation(self.implementation, device_type)
        self._resolve_hash_backend(device_type)
        self._check_table_growth()
        self.sampler_config().resolve(device_type, contract)

    def _resolve_hash_backend(self, device_type: str) -> None:
        """``auto``: the fastest backend that runs on ``device_type`` and builds the field's grid; refused where the
        explicit choice cannot run."""
        if self.hash_backend == "auto":  # an object scene's block may have a table tiny-cuda-nn does not build
            self.hash_backend = resolve_hash_backend(self.hash_backend, device_type, self.field_tcnn_builds())
            logger.info(
                "accel-ngp: hash encoding backend %s on %s (--pipeline.model.hash-backend)",
                self.hash_backend,
                device_type,
            )
        check_hash_backend(self.hash_backend, device_type)

    def _check_table_growth(self) -> None:
        """Refuse growth where the table cannot grow (a negative step, a table of 2^1 rows a level, spatial blocks,
        tiny-cuda-nn)."""
        assert self.log2_hashmap_size is not None
        step = self.table_growth_step
        if step < 0:
            raise ConfigError(f"--pipeline.model.table-growth-step {step}: choose a step, or 0 for no growth")
        if step > 0 and self.log2_hashmap_size < 2:
            raise ConfigError(
                f"--pipeline.model.table-growth-step {step}: a table of 2^{self.log2_hashmap_size} rows a level "
                f"has no half to start from; set it to 0"
            )
        if step > 0 and self.spatial_blocks != 1:
            raise ConfigError(
                f"--pipeline.model.table-growth-step {step}: a spatial block's hash table keeps its rows; set it to 0"
            )
        if step > 0 and self.hash_backend == "tcnn":
            raise ConfigError(
                f"--pipeline.model.table-growth-step {step}: tiny-cuda-nn's hash table keeps its rows; use "
                f"--pipeline.model.hash-backend auto (or kernel), or set the step to 0"
            )

    def table_log2_at(self, step: int) -> int:
        """The radiance field's rows a level (a power of two) at training ``step`` (after :meth:`resolve`)."""
        assert self.log2_hashmap_size is not None, "resolve() first"
        return self.log2_hashmap_size - 1 if step < self.table_growth_step else self.log2_hashmap_size

    def check_spatial_blocks(self) -> None:
        """1 to :data:`~nerfstudio_accel.spatial.cells.MAX_BLOCKS` blocks, with a sampler built per cell (the
        occupancy grid's for object scenes, the proposal fields' for both kinds)."""
        blocks = self.spatial_blocks
        if blocks == 1:
            return
        if not 1 <= blocks <= MAX_BLOCKS:
            raise ConfigError(f"--pipeline.spatial-blocks {blocks}: choose 1 to {MAX_BLOCKS} blocks")
        if self.sampler == "proposal" and self.proposal.distortion_loss_mult > 0:
            raise ConfigError(
                f"--pipeline.spatial-blocks {blocks} with --pipeline.model.proposal.distortion-loss-mult "
                f"{self.proposal.distortion_loss_mult}: the distortion loss over blocks is not built; set it to 0"
            )
        if self.hash_backend == "tcnn" and not self.field_tcnn_builds():
            raise ConfigError(
                f"--pipeline.spatial-blocks {blocks} with --pipeline.model.hash-backend tcnn: a block's hash table "
                "keeps dense levels larger than its hash table, which tiny-cuda-nn's grid does not hold; use "
                "--pipeline.model.hash-backend auto"
            )
        contract = self.scene_contraction == "on"
        if not self.sampler_config().builds_blocks(contract):
            scene = "a capture (scene contraction on)" if contract else "an object scene"
            raise ConfigError(
                f"--pipeline.spatial-blocks {blocks}: the {self.sampler} sampler has no per-block form for {scene} "
                f"yet; use --pipeline.model.sampler proposal"
            )

    def field_tcnn_builds(self) -> bool:
        """Whether tiny-cuda-nn builds the radiance field's hash grid: not one that grows in training; one model's and
        a capture's blocks' always; an object scene's blocks keep one model's dense levels (docs/spatial_blocks.md),
        which tiny-cuda-nn holds only where none is larger than a block's table (not with the CPU's 2^15 or 2^17 rows;
        with CUDA's 2^19 for 2 or 3 blocks)."""
        if self.table_growth_step > 0:
            return False  # its rows change in training
        if not 1 < self.spatial_blocks <= MAX_BLOCKS or self.scene_contraction == "on":
            return True  # a count out of range is refused by check_spatial_blocks
        assert self.log2_hashmap_size is not None, "resolve() first"
        table = block_table_log2(self.log2_hashmap_size, self.spatial_blocks)
        layout = HashGridField.grid_layout(self.num_levels, self.max_res, table, self.log2_hashmap_size)
        return layout.tcnn_builds

    def sampler_config(self) -> SamplerConfig:
        """The options of the sampler chosen (after :meth:`resolve`)."""
        assert self.sampler in ("occupancy", "proposal"), "resolve() first"
        return self.occupancy if self.sampler == "occupancy" else self.proposal

    def __setstate__(self, state: Dict[str, Any]) -> None:
        """A config.yml written before the samplers' options had their own groups opens with them moved there."""
        groups = {"occupancy": OccupancySamplerConfig, "proposal": ProposalSamplerConfig}
        self.__dict__.update(move_model_fields(state, groups))

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

    def weighs_rays(self) -> bool:
        return True

    def runs_numba_kernels(self) -> bool:
        """The ``kernel`` hash encoding or occupancy marcher, resolved for a CPU run (numba there, Triton on CUDA)."""
        marcher = self.occupancy.backend if self.sampler == "occupancy" else None
        return runs_numba_kernels(self.hash_backend, marcher)  # type: ignore[arg-type]

    def hard_mining_pays(self, device_type: str, scene: SceneFacts) -> bool:
        """On a CPU with the occupancy sampler mining reuses the culling pass: ahead at equal time in two pairs of
        three, cheaper per step (lego). With the proposal sampler it was behind in every pair (fruit, CPU). On
        CUDA a mined step costs more than an ordinary one (1.26x occupancy, 1.66x proposal, H200) and mining was
        behind at equal time in both seeds (lego 400x400, occupancy): off there, and on MPS (unmeasured)."""
        return device_type == "cpu" and self.sampler == "occupancy"

    def uses_tcnn(self) -> bool:
        return "tcnn" in (self.implementation, self.hash_backend)


LARGE_SCENE_PIXELS = 3_000_000
"""Training pixels (all training images, as trained) from which a CPU run's hash table gets 2^17 rows a level."""


def default_table_log2(device_type: str, scene: SceneFacts) -> int:
    """Hash-table rows per level, as a power of two: 19 on CUDA; elsewhere 15 (a level's table and its gradient
    fit a core's L2 cache), or 17 for a scene of at least :data:`LARGE_SCENE_PIXELS` training pixels, where the
    larger table measured ahead at equal time (docs/hash_encoding.md)."""
    if device_type == "cuda":
        return 19
    large = scene.train_pixels is not None and scene.train_pixels >= LARGE_SCENE_PIXELS
    return 17 if large else 15


BLOCK_SAMPLERS: Dict[str, Type[CellSamplers]] = {"occupancy": BlockSampler, "proposal": BlockProposalSampler}
"""The sampler of a split scene, by ``--pipeline.model.sampler``: it merges the cells' samplers along each ray."""


class AccelNGPModel(AccelModel):
    """Instant-NGP behind the accel seams, sampling through one :class:`~nerfstudio_accel.sampling.base.Sampler`."""

    config: AccelNGPModelConfig

    def populate_modules(self) -> None:
        super().populate_modules()
        cfg = self.config
        device = torch.device(self.kwargs.get("device", "cpu"))
        assert cfg.log2_hashmap_size is not None
        check_implementation(cfg.implementation, device.type, "accel-ngp")
        contract = cfg.scene_contraction == "on"
        aabb = self.scene_box.aabb.float()
        hash_backend = runnable_hash_backend(cfg.hash_backend, device.type, cfg.field_tcnn_builds())

        def hash_grid_field(
            box: Float[Tensor, "2 3"],
            log2_hashmap_size: int,
            region: Optional[Tensor] = None,
            shared_appearance: bool = False,
            log2_dense_limit: Optional[int] = None,
            max_log2_hashmap_size: Optional[int] = None,
        ) -> HashGridField:
            return HashGridField(
                aabb=box,
                grid_region=region,
                contract=contract,
                num_levels=cfg.num_levels,
                max_res=cfg.max_res,
                log2_hashmap_size=log2_hashmap_size,
                log2_dense_limit=log2_dense_limit,
                max_log2_hashmap_size=max_log2_hashmap_size,
                hidden_dim=cfg.hidden_dim,
                hidden_dim_color=cfg.hidden_dim_color,
                implementation=cfg.implementation,
                hash_backend=hash_backend,
                num_images=self.num_train_data,
                appearance_dim=cfg.appearance_embedding_dim or 0,
                shared_appearance=shared_appearance,
            )

        scene = SamplerScene(aabb, contract, cfg.near_plane, cfg.far_plane, device, cfg.implementation, hash_backend)
        if cfg.spatial_blocks == 1:
            self.field: RadianceField = hash_grid_field(
                aabb, cfg.table_log2_at(0), max_log2_hashmap_size=cfg.log2_hashmap_size
            )
            self.sampler = cfg.sampler_config().setup(scene)
        else:  # a field and a sampler per cell, the tables shared out (docs/spatial_blocks.md)
            cells = kd_cells(aabb, cfg.spatial_blocks)
            if contract:  # the outer cells reach out to all of space
                cells = unbounded_cells(cells, aabb)
            block_table = block_table_log2(cfg.log2_hashmap_size, cfg.spatial_blocks)
            rank_block = block_ranks.own_block(cfg.spatial_blocks)
            held = range(cfg.spatial_blocks) if rank_block is None else [rank_block]
            appearance = appearance_embedding(self.num_train_data, cfg.appearance_embedding_dim or 0)
            shared = appearance is not None  # one appearance vector per image, every block's
            fields = {}
            for block in held:
                with block_ranks.block_initial_weights(block):
                    if contract:  # contracted around the scene box, the grid over the part its cell maps into
                        region = contracted_region(cells[block], aabb)
                        fields[block] = hash_grid_field(aabb, block_table, region, shared)
                    else:  # one model's lattice and dense levels; the block reads the vertices around its cell
                        fields[block] = hash_grid_field(aabb, block_table, None, shared, cfg.log2_hashmap_size)
            self.field = BlockFields(fields, cells, appearance)
            samplers = cfg.sampler_config().setup_cells(scene, cells, held)
            self.sampler = BLOCK_SAMPLERS[cfg.sampler](
                samplers,
                cells,
                cfg.near_plane,
                cfg.far_plane,
                shown_box=aabb,  # type: ignore[arg-type]
            )
        self.camera_optimizer = cfg.camera_optimizer.setup(num_cameras=self.num_train_data, device="cpu")
        self.image_metrics = ImageMetrics()
        self.finished_run_viewer = FinishedRunViewer()  # nerfstudio's Viewer sets it up (ns-viewer's page)
        self.update_to_step(0)

    def own_sampler(self) -> Sampler:
        return self.sampler

    @property
    def background_mode(self) -> BackgroundMode:
        """The resolved background (``random`` renders white outside training)."""
        return self.config.background  # type: ignore[return-value]

    def get_param_groups(self) -> Dict[str, List[Parameter]]:
        """The radiance field and the sampler's own fields, if any, train together (block by block in a split
        scene, whose blocks' shared appearance embedding is the ``appearance`` group); the camera optimizer has its
        own group."""
        groups = {"fields": self._field_parameters()}
        if isinstance(self.field, BlockFields) and self.field.appearance is not None:
            groups[APPEARANCE_GROUP] = list(self.field.appearance.parameters())
        self.camera_optimizer.get_param_groups(param_groups=groups)
        return groups

    def _field_parameters(self) -> List[Parameter]:
        """The field's and the sampler's parameters; in a split scene each block's field then sampler, block by
        block (the order a rank's part of the optimizer keeps, :mod:`~nerfstudio_accel.spatial.block_ranks`)."""
        if not isinstance(self.field, BlockFields):
            return list(self.field.parameters()) + list(self.sampler.parameters())
        assert isinstance(self.sampler, CellSamplers)
        pairs = zip(self.field.field_list(), self.sampler.sampler_list())
        return [p for field, sampler in pairs for p in (*field.parameters(), *sampler.parameters())]

    @property
    def own_block(self) -> Optional[int]:
        """The block this rank trains alone (one block per rank); None when the process holds the whole model."""
        return self.field.own_block if isinstance(self.field, BlockFields) else None

    def rank_owned_parameters(self) -> Optional[List[Parameter]]:
        return self._field_parameters() if self.own_block is not None else None

    def get_training_callbacks(
        self, training_callback_attributes: TrainingCallbackAttributes
    ) -> List[TrainingCallback]:
        optimizers = training_callback_attributes.optimizers
        optimizer_list = list(optimizers.optimizers.values()) if optimizers is not None else []

        def update_sampler(step: int) -> None:
            self.grow_table_to_step(step, optimizer_list)
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

    def grow_table_to_step(self, step: int, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """In training, grow the radiance field's hash table to its rows at ``step``
        (:meth:`AccelNGPModelConfig.table_log2_at`), the gradient and ``optimizers``' state of it alike; a table
        already that large (a checkpoint or a warm start of a grown run loaded) is left alone."""
        if isinstance(self.field, BlockFields):
            return  # a block's table keeps its rows (the config refuses growth with blocks)
        encoding = self.field.position_encoding
        rows = self.config.table_log2_at(step)
        if rows <= encoding.layout.log2_hashmap_size:
            return
        encoding.grow(rows, optimizers)
        if distributed.rank() == 0:
            CONSOLE.print(
                f"Step {step}: hash table grown to 2^{rows} rows per level (--pipeline.model.table-growth-step)"
            )

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
            positions = packed.positions if self.field.color_raw_reads_positions else None
            color = self.field.color_raw(kept[:, 1:], directions, packed.sample_camera_indices, positions)
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
        if self.own_block is not None:
            return self._composite_over_ranks(packed, density, color, background)
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

    def _composite_over_ranks(
        self,
        packed: PackedSamples,
        density: Float[Tensor, "n 1"],
        color: Float[Tensor, "n 3"],
        background: Float[Tensor, "n_rays 3"],
    ) -> Dict[str, Tensor]:
        """One block per rank: this block's render of its samples, every rank's render of the same rays gathered
        (:func:`~nerfstudio_accel.spatial.block_composite.gather_block_renders`) and composited, so the loss is the
        whole model's and its gradient reaches this block's samples only. ``num_samples_per_ray`` counts every
        block's samples, so every rank sizes the next ray batch alike. In training, the sampler's own losses (a
        block's proposal fields') read the block's weights times the transmittance in front of it, the weights one
        process gives those samples."""
        own = render_block(packed, density, color, backend=self.sampler.backend_for(density.device))
        renders = gather_block_renders(own)
        outputs = composite_blocks(renders, background)
        outputs["background"] = background
        outputs["num_samples_per_ray"] = torch.stack([render.samples for render in renders]).sum(dim=0)[:, None]
        if self.training and self.sampler.loss_names:  # the block's weights as the whole ray sees them
            assert own.weights is not None
            in_front = transmittance_in_front(renders)[distributed.rank()]
            outputs.update(self.sampler.losses(packed, in_front.detach()[packed.ray_indices] * own.weights))
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
        outputs.pop("weights", None)
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
        errors = self._squared_errors(outputs, batch)
        weights = batch.get("ray_weights")
        losses = {"rgb_loss": torch.mean(errors if weights is None else errors * weights.to(errors))}
        losses.update({name: outputs[name] for name in self.sampler.loss_names if name in outputs})
        if self.training and self.own_block in (None, 0):  # on ranks, rank 0 alone: they sum shared gradients
            self.camera_optimizer.get_loss_dict(losses)
        return losses

    def _squared_errors(self, outputs: Dict[str, Tensor], batch: Dict[str, Tensor]) -> Float[Tensor, " R"]:
        """Each ray's squared colour error against its ground truth over the same background, mean over channels."""
        target = composite_ground_truth(batch["image"].to(self.device), outputs["background"])
        return torch.mean((outputs["rgb"] - target) ** 2, dim=-1)

    def ray_errors(self, outputs: Dict[str, Tensor], batch: Dict[str, Tensor]) -> Float[Tensor, " R"]:
        with torch.no_grad():
            return self._squared_errors(outputs, batch)

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

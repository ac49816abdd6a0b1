"""ProposalSampler: coarse-to-fine sampling with small proposal density fields (mip-NeRF 360, nerfacc's
``PropNetEstimator``), a fixed sample count per ray for the main field.

Round 0 spaces ``proposal_samples[0]`` intervals evenly (linear, or linear-then-disparity for unbounded
scenes) between each ray's near and far distance and evaluates proposal field 0 there; each next round
resamples the previous round's weights (annealed: ``w ** anneal``) as a piecewise-constant PDF and
evaluates its own field; the main field finally gets ``num_samples`` intervals drawn from the last
round. The proposal fields learn only through :meth:`ProposalSampler.interlevel_loss`, which asks each
round's weights to bound the main field's. Every op is pure PyTorch (:mod:`.proposal_ops`).

It implements :class:`~nerfstudio_accel.sampling.base.Sampler`: :meth:`sample`, :meth:`update` (the
annealing schedule) and :meth:`losses` (interlevel, and optionally distortion, from the rounds of the last
training sampling, which the sampler keeps as nerfacc's ``PropNetEstimator`` keeps its ``prop_cache``).
:class:`ProposalSamplerConfig` holds the options a model nests as ``--pipeline.model.proposal.*``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from jaxtyping import Float
from torch import Tensor, nn

from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.fields.proposal_field import ProposalDensityField
from nerfstudio_accel.ops.ray_aabb import ray_aabb_intersect
from nerfstudio_accel.sampling import proposal_ops
from nerfstudio_accel.sampling.base import DensityFn, Sampler, SamplerConfig, SamplerScene, ray_bounds
from nerfstudio_accel.sampling.packed import PackedSamples
from nerfstudio_accel.sampling.proposal_ops import Spacing
from nerfstudio_accel.spatial.block_ranks import block_initial_weights
from nerfstudio_accel.spatial.cells import block_table_log2, contracted_region
from nerfstudio_accel.step_phases import phase


@dataclass
class ProposalRounds:
    """One sampling's proposal rounds, for the interlevel loss: each round's edges ``(n_rays, k_i + 1)``
    (normalised spacing) and weights ``(n_rays, k_i)`` (with the proposal fields' graph in training), and
    the main field's edges ``(n_rays, num_samples + 1)``."""

    edges: List[Tensor] = field(default_factory=list)
    weights: List[Tensor] = field(default_factory=list)
    final_edges: Tensor = field(default_factory=lambda: torch.zeros(0, 1))


def annealing_exponent(step: int, anneal_steps: int, slope: float = 10.0) -> float:
    """The exponent on proposal weights before resampling, rising from 0 (uniform resampling) at step 0
    to 1 at ``anneal_steps`` along ``slope x / ((slope - 1) x + 1)`` (steep at first)."""
    if anneal_steps <= 0:
        return 1.0
    x = min(max(step / anneal_steps, 0.0), 1.0)
    return slope * x / ((slope - 1.0) * x + 1.0)


class ProposalSampler(Sampler):
    """Proposal fields and coarse-to-fine sampling through them.

    Args:
        fields: one density field per proposal round (positions ``(n, 3)`` -> densities ``(n, 1)``).
        proposal_samples: intervals per ray in each round, e.g. ``(256, 96)``.
        num_samples: intervals per ray for the main field, e.g. 48.
        spacing: ``linear`` (bounded scenes) or ``lindisp`` (unbounded: uniform in disparity beyond 1 unit).
        anneal_steps: training steps over which resampling goes from uniform to the proposal's weights.
        aabb: ``(6,)`` box a bounded scene's rays are clipped to (their entry and exit); None: unbounded.
        near_plane, far_plane: distances every ray is clipped to.
        interlevel_loss_mult: weight of the interlevel loss :meth:`losses` returns.
        distortion_loss_mult: weight of mip-NeRF 360's distortion loss on the main field's weights; 0: not computed.
    """

    def __init__(
        self,
        fields: Sequence[nn.Module],
        proposal_samples: Sequence[int] = (256, 96),
        num_samples: int = 48,
        spacing: Spacing = "lindisp",
        anneal_steps: int = 1000,
        aabb: Optional[Float[Tensor, "6"]] = None,
        near_plane: float = 0.05,
        far_plane: float = 1e3,
        interlevel_loss_mult: float = 1.0,
        distortion_loss_mult: float = 0.0,
    ) -> None:
        super().__init__()
        if len(fields) != len(proposal_samples) or not fields:
            raise ValueError(f"one proposal field per round: {len(fields)} fields for {len(proposal_samples)} rounds")
        if min(proposal_samples) < 1 or num_samples < 1:
            raise ValueError(
                f"sample counts must be >= 1, got proposal {tuple(proposal_samples)} and main {num_samples}"
            )
        self.fields = nn.ModuleList(fields)
        self.proposal_samples = tuple(int(k) for k in proposal_samples)
        self.num_samples = int(num_samples)
        self.spacing: Spacing = spacing
        self.anneal_steps = anneal_steps
        self.register_buffer(
            "aabb", None if aabb is None else aabb.detach().clone().float().reshape(6), persistent=False
        )
        self.near_plane, self.far_plane = near_plane, far_plane
        self.interlevel_loss_mult, self.distortion_loss_mult = interlevel_loss_mult, distortion_loss_mult
        self.anneal = 1.0
        """Current exponent on proposal weights (:meth:`update` sets it; 1 outside training)."""
        self._last_rounds: Optional[Tuple[Tensor, ProposalRounds]] = None
        """The last training :meth:`sample`'s ``t_starts`` and the rounds behind them (with the proposal fields'
        graph), until :meth:`losses` reads them."""

    overlay_label = "Show proposal samples (centre ray)"
    loss_names = ("interlevel_loss", "distortion_loss")

    def update(self, step: int, density_fn: Optional[DensityFn] = None) -> None:
        """Advance the annealing schedule to ``step`` (the main field's density is not needed)."""
        self.anneal = annealing_exponent(step, self.anneal_steps)

    def sample(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        nears: Optional[Float[Tensor, " n_rays"]] = None,
        fars: Optional[Float[Tensor, " n_rays"]] = None,
        density_fn: Optional[DensityFn] = None,
        stratified: bool = False,
        generator: Optional[torch.Generator] = None,
    ) -> PackedSamples:
        """``num_samples`` packed samples per ray between its near and far distance (the box's entry and
        exit when bounded); in training the sampler keeps the proposal rounds behind them for :meth:`losses`.
        ``density_fn`` is not called; ``generator`` draws the jitter (None: the default one)."""
        n_rays = origins.shape[0]
        near, far = ray_bounds(n_rays, self.near_plane, self.far_plane, nears, fars, origins.device)
        if self.aabb is not None:
            enter, exit_, _ = ray_aabb_intersect(origins, directions, self.aabb)
            near, far = torch.maximum(near, enter), torch.minimum(far, exit_)
        with phase("proposal rounds"):
            distances, rounds = self.propose(origins, directions, near, far, stratified, generator)
        per_ray = distances.shape[1] - 1
        ray_indices = torch.arange(n_rays, device=origins.device).repeat_interleave(per_ray)
        samples = PackedSamples(
            ray_indices, distances[:, :-1].reshape(-1), distances[:, 1:].reshape(-1), origins, directions
        )
        if self.training:
            self._last_rounds = (samples.t_starts, rounds)
        return samples

    def propose(
        self,
        origins: Float[Tensor, "n_rays 3"],
        directions: Float[Tensor, "n_rays 3"],
        near: Float[Tensor, " n_rays"],
        far: Float[Tensor, " n_rays"],
        stratified: bool = False,
        generator: Optional[torch.Generator] = None,
    ) -> tuple[Float[Tensor, "n_rays m1"], ProposalRounds]:
        """Distances of the main field's ``num_samples + 1`` interval edges per ray and the rounds behind
        them. The proposal fields run with a graph when grad is enabled (training), without one otherwise;
        ``stratified`` jitters every round (training), otherwise the result is deterministic."""
        n_rays, device = origins.shape[0], origins.device
        near, far = near.reshape(-1, 1).float(), torch.maximum(far.reshape(-1, 1).float(), near.reshape(-1, 1).float())
        rounds = ProposalRounds()
        anneal = self.anneal if self.training else 1.0
        edges = proposal_ops.uniform_edges(n_rays, self.proposal_samples[0], stratified, device, generator)
        for index, (proposal_field, n_intervals) in enumerate(zip(self.fields, self.proposal_samples)):
            if index > 0:
                edges = proposal_ops.resample_edges(
                    edges, rounds.weights[-1].detach() ** anneal, n_intervals, stratified, generator=generator
                )
            distances = proposal_ops.spacing_to_distance(edges, near, far, self.spacing)
            middles = 0.5 * (distances[:, 1:] + distances[:, :-1])
            points = origins[:, None, :] + directions[:, None, :] * middles[..., None]
            densities = proposal_field(points.reshape(-1, 3)).reshape(n_rays, n_intervals)
            rounds.edges.append(edges)
            rounds.weights.append(proposal_ops.weights_from_density(distances, densities))
        rounds.final_edges = proposal_ops.resample_edges(
            edges, rounds.weights[-1].detach() ** anneal, self.num_samples, stratified, generator=generator
        )
        return proposal_ops.spacing_to_distance(rounds.final_edges, near, far, self.spacing), rounds

    def losses(self, samples: PackedSamples, weights: Float[Tensor, " n_samples"]) -> Dict[str, Tensor]:
        """``interlevel_loss`` (and ``distortion_loss`` when its weight is not 0), weighted, of the full set of
        samples the last training :meth:`sample` returned (the same intervals, on any rays), whose rounds it then
        lets go; none for other samples (a subset) or no rays."""
        last, self._last_rounds = self._last_rounds, None
        if last is None or last[0] is not samples.t_starts or samples.n_rays == 0:
            return {}
        rounds = last[1]
        per_ray = weights.reshape(samples.n_rays, -1)
        losses = {"interlevel_loss": self.interlevel_loss_mult * self.interlevel_loss(rounds, per_ray)}
        if self.distortion_loss_mult > 0:
            losses["distortion_loss"] = self.distortion_loss_mult * proposal_ops.distortion_loss(
                rounds.final_edges, per_ray
            )
        return losses

    @staticmethod
    def interlevel_loss(rounds: ProposalRounds, weights: Float[Tensor, "n_rays m"]) -> Float[Tensor, ""]:
        """Sum over proposal rounds of :func:`~.proposal_ops.interlevel_loss` against the main field's
        ``weights`` (detached: only the proposal fields learn from it)."""
        return sum(
            (
                proposal_ops.interlevel_loss(rounds.final_edges, weights, edges, round_weights)
                for edges, round_weights in zip(rounds.edges, rounds.weights)
            ),
            torch.zeros((), device=weights.device),
        )


@dataclass
class ProposalSamplerConfig(SamplerConfig):
    """The proposal sampler's options (``--pipeline.model.proposal.*``)."""

    num_samples: Optional[int] = None
    """Samples per ray for the main field; default 48 on CUDA (nerfacc's choice), 32 elsewhere (more rays per
    CPU second; docs/captured_scenes.md)."""
    samples_per_round: Optional[Tuple[int, ...]] = None
    """Samples per ray in each proposal round (one proposal field per round); default 256 96 on CUDA, 128 64
    elsewhere."""
    max_res: Tuple[int, ...] = (128, 256)
    """Finest hash-grid resolution of each proposal field."""
    log2_hashmap_size: int = 17
    anneal_steps: int = 1000
    """Steps over which resampling moves from uniform to the proposal weights."""
    interlevel_loss_mult: float = 1.0
    """Weight of the interlevel loss that trains the proposal fields."""
    distortion_loss_mult: float = 0.0
    """Weight of mip-NeRF 360's distortion loss on the main field's weights, against floaters (nerfacto uses
    0.002); 0: off, the default, as it did not help on fruit at 300 s (docs/captured_scenes.md)."""

    def resolve(self, device_type: str, contract: bool) -> None:
        """Sample counts for the device; one resolution per round, or a one-line error."""
        on_cuda = device_type == "cuda"
        if self.num_samples is None:
            self.num_samples = 48 if on_cuda else 32
        if self.samples_per_round is None:  # one count per proposal field
            counts = (256, 96) if on_cuda else (128, 64)
            self.samples_per_round = tuple(counts[min(i, 1)] for i in range(len(self.max_res)))
        if len(self.samples_per_round) != len(self.max_res):
            raise ConfigError(
                f"--pipeline.model.proposal.samples-per-round names {len(self.samples_per_round)} rounds but "
                f"--pipeline.model.proposal.max-res {len(self.max_res)}; give one resolution per round"
            )

    def builds_blocks(self, contract: bool) -> bool:
        return True

    def setup_cells(
        self, scene: SamplerScene, cells: Float[Tensor, "k 2 3"], held: Optional[Sequence[int]] = None
    ) -> Dict[int, Sampler]:
        """A proposal sampler per cell held (every cell by default), with its own proposal fields: over its cell (an
        object scene), or over the part of the contracted grid its cell maps into (a capture); their tables shared
        out (each ``1 / 2^floor(log2 k)`` of the whole scene's), their initial weights
        block ``k``'s alike on every rank. They clip no ray: the block sampler clips each to its cell."""
        assert self.num_samples is not None and self.samples_per_round is not None, "resolve() first"
        aabb, table = scene.aabb.float(), block_table_log2(self.log2_hashmap_size, cells.shape[0])
        samplers: Dict[int, Sampler] = {}
        for k in range(cells.shape[0]) if held is None else held:
            cell = cells[k].to(aabb)
            box, region = (aabb, contracted_region(cell, aabb)) if scene.contract else (cell, None)
            with block_initial_weights(k, part=1):
                samplers[k] = self._sampler(scene, box, table, region, None)
        return samplers

    def setup(self, scene: SamplerScene) -> ProposalSampler:
        """One proposal field per round over ``scene``'s box, on the scene's kernels; a bounded scene's rays are
        clipped to the box."""
        assert self.num_samples is not None and self.samples_per_round is not None, "resolve() first"
        aabb = scene.aabb.float()
        return self._sampler(scene, aabb, self.log2_hashmap_size, None, None if scene.contract else aabb.flatten())

    def _sampler(
        self,
        scene: SamplerScene,
        box: Float[Tensor, "2 3"],
        log2_table: int,
        region: Optional[Float[Tensor, "2 3"]],
        clip: Optional[Float[Tensor, "6"]],
    ) -> ProposalSampler:
        """Proposal fields over ``box`` (the contracted ``region`` of it, when given), clipping rays to ``clip``."""
        assert self.num_samples is not None and self.samples_per_round is not None, "resolve() first"
        fields = [
            ProposalDensityField(
                box,
                scene.contract,
                max_res=res,
                log2_hashmap_size=log2_table,
                implementation=scene.implementation,
                hash_backend=scene.hash_backend,
                grid_region=region,
            )
            for res in self.max_res
        ]
        return ProposalSampler(
            fields,
            self.samples_per_round,
            self.num_samples,
            spacing="lindisp" if scene.contract else "linear",
            anneal_steps=self.anneal_steps,
            aabb=clip,
            near_plane=scene.near_plane,
            far_plane=scene.far_plane,
            interlevel_loss_mult=self.interlevel_loss_mult,
            distortion_loss_mult=self.distortion_loss_mult,
        )

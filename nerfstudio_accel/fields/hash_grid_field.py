"""HashGridField: an Instant-NGP radiance field that exposes its pre-activation outputs.

Built from our multiresolution hash encoding (:mod:`nerfstudio_accel.encodings.hash_encoding`: torch reference,
fused kernels or tiny-cuda-nn over one table layout) and nerfstudio's ``SHEncoding`` and ``MLP``, which run
on tiny-cuda-nn when it is installed and the field lives on CUDA, pure PyTorch otherwise.

The split ``field_raw`` (pre-activation density and colour) / ``activate`` is the seam hard sample
mining uses: it scores samples by the loss gradient w.r.t. the raw outputs.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

import torch
from jaxtyping import Float, Int
from nerfstudio.field_components.activations import trunc_exp
from nerfstudio.field_components.encodings import SHEncoding
from nerfstudio.field_components.mlp import MLP
from torch import Tensor, nn

from nerfstudio_accel.encodings.hash_encoding import MultiresHashEncoding
from nerfstudio_accel.kernels.density_network import DensityNetwork
from nerfstudio_accel.kernels.hash_layout import HashGridLayout
from nerfstudio_accel.ops.direction_encoding import spherical_harmonics
from nerfstudio_accel.ops.hash_encoding import cached_level_tensors, fused_culling_reads

MAX_LOG_DENSITY = 60.0
"""Cap on the density exponent: ``exp(60)`` per world unit is opaque over any interval, and finite."""

FieldImplementation = Literal["auto", "tcnn", "torch"]


def grid_coordinates(
    positions: Float[Tensor, "n 3"],
    aabb: Float[Tensor, "2 3"],
    contract: bool,
    region: Optional[Float[Tensor, "2 3"]] = None,
) -> Float[Tensor, "n 3"]:
    """World positions to hash-grid coordinates in ``[0, 1]^3``. ``contract``: the box maps to the central
    ``[1/4, 3/4]^3`` and everything outside it into the shell around, by inf-norm scene contraction
    (``x -> (2 - 1/|x|) x/|x|`` for ``|x| > 1`` in box units), and ``region`` (a box of those coordinates: the
    part a block's grid spans, :func:`~nerfstudio_accel.spatial.cells.contracted_region`) is stretched over
    ``[0, 1]^3``; otherwise positions are clamped to the box."""
    lower, upper = aabb[0], aabb[1]
    if contract:
        centered = (positions - 0.5 * (lower + upper)) / (0.5 * (upper - lower))  # box -> [-1, 1]^3
        magnitude = centered.abs().amax(dim=-1, keepdim=True).clamp(min=1e-6)
        contracted = torch.where(magnitude < 1, centered, (2 - 1 / magnitude) * (centered / magnitude))
        unit = (contracted + 2.0) / 4.0
        if region is None:
            return unit
        return ((unit - region[0]) / (region[1] - region[0])).clamp(0.0, 1.0)
    return ((positions - lower) / (upper - lower)).clamp(0.0, 1.0)


def appearance_embedding(num_images: int, dim: int) -> Optional[nn.Embedding]:
    """A ``dim``-vector per training image, drawn near 0; None without images or when ``dim`` is 0."""
    if dim <= 0 or num_images <= 0:
        return None
    embedding = nn.Embedding(num_images, dim)
    nn.init.normal_(embedding.weight, std=0.01)
    return embedding


def appearance_vectors(
    embedding: nn.Embedding, camera_indices: Optional[Int[Tensor, " n"]], n: int, training: bool
) -> Float[Tensor, "n dim"]:
    """Each of ``n`` samples' vector: its image's in training, the mean vector otherwise (or without indices)."""
    if training and camera_indices is not None:
        return embedding(camera_indices.reshape(-1).long().clamp(0, embedding.num_embeddings - 1))
    return embedding.weight.mean(dim=0).expand(n, -1)


class HashGridField(nn.Module):
    """Density from a hash grid + small MLP; view-dependent colour from SH-encoded directions.

    Args:
        aabb: scene box ``(2, 3)`` (min corner, max corner) in world units.
        contract: map unbounded space into the grid (inf-norm scene contraction around the box).
        num_levels, min_res, max_res, log2_hashmap_size, features_per_level: hash-grid shape.
        hidden_dim, geo_feat_dim, hidden_dim_color, num_layers_color: MLP sizes.
        implementation: MLPs and direction encoding on ``tcnn`` or ``torch``, resolved
            (:func:`~nerfstudio_accel.ops.backends.resolve_implementation`);
            nerfstudio's modules build their torch versions when tiny-cuda-nn does not import.
        hash_backend: the position encoding's backend, resolved (``torch``, ``kernel`` or ``tcnn``).
        num_images, appearance_dim: a learned ``appearance_dim``-vector per training image, fed to the colour
            MLP (exposure and white balance vary across photos); outside training every view gets the mean
            vector, as nerfacto does, so unseen images render with the average appearance. 0: none.
        shared_appearance: the colour MLP takes ``appearance_dim``-vectors from the caller (the blocks of a split
            scene share one embedding, :class:`~nerfstudio_accel.spatial.block_field.BlockFields`); the field holds
            none.
        grid_region: with ``contract``, the box ``(2, 3)`` of contracted coordinates the hash grid spans (a block
            of a split capture); None: all of them.
        log2_dense_limit: levels with at most ``2**log2_dense_limit`` vertices stay dense above the table's size (a
            block of a split object scene keeps one model's dense levels); see
            :class:`~nerfstudio_accel.kernels.hash_layout.HashGridLayout`.
        max_log2_hashmap_size: the rows a level the position encoding may grow to in training
            (:meth:`~nerfstudio_accel.encodings.hash_encoding.MultiresHashEncoding.grow`); None: no growth.
    """

    color_raw_reads_positions = False
    """Whether :meth:`color_raw` reads the samples' ``positions`` (a split scene's fields do)."""

    def __init__(
        self,
        aabb: Float[Tensor, "2 3"],
        contract: bool = False,
        num_levels: int = 16,
        min_res: int = 16,
        max_res: int = 2048,
        log2_hashmap_size: int = 19,
        features_per_level: int = 2,
        hidden_dim: int = 64,
        geo_feat_dim: int = 15,
        hidden_dim_color: int = 64,
        num_layers_color: int = 2,
        implementation: Literal["tcnn", "torch"] = "torch",
        hash_backend: Literal["torch", "kernel", "tcnn"] = "torch",
        num_images: int = 0,
        appearance_dim: int = 0,
        grid_region: Optional[Float[Tensor, "2 3"]] = None,
        shared_appearance: bool = False,
        log2_dense_limit: Optional[int] = None,
        max_log2_hashmap_size: Optional[int] = None,
    ) -> None:
        super().__init__()
        self.register_buffer("aabb", aabb.detach().clone().float())
        self.contract = contract
        self.grid_region: Optional[Tensor]
        self.register_buffer("grid_region", None if grid_region is None else grid_region.detach().clone().float())
        self.geo_feat_dim = geo_feat_dim
        layout = self.grid_layout(num_levels, max_res, log2_hashmap_size, log2_dense_limit, min_res, features_per_level)
        self.position_encoding = MultiresHashEncoding(layout, hash_backend, max_log2_hashmap_size)
        self.level_weights: Optional[Tensor] = None
        """``(levels * features,)`` weights of the encoding's features (coarse-to-fine training), or None: all 1."""
        self.density_mlp = MLP(
            in_dim=self.position_encoding.get_out_dim(),
            num_layers=2,
            layer_width=hidden_dim,
            out_dim=1 + geo_feat_dim,
            activation=nn.ReLU(inplace=True),  # on the layer's fresh output: no copy per hidden layer
            implementation=implementation,
        )
        self.direction_encoding = SHEncoding(levels=4, implementation=implementation)
        self.appearance = None if shared_appearance else appearance_embedding(num_images, appearance_dim)
        self.appearance_input = appearance_dim if self.appearance is not None or shared_appearance else 0
        """The width of the appearance vectors the colour MLP reads (0: none)."""
        self.color_mlp = MLP(
            in_dim=self.direction_encoding.get_out_dim() + geo_feat_dim + self.appearance_input,
            num_layers=num_layers_color + 1,
            layer_width=hidden_dim_color,
            out_dim=3,
            activation=nn.ReLU(inplace=True),  # on the layer's fresh output: no copy per hidden layer
            implementation=implementation,
        )

    @staticmethod
    def grid_layout(
        num_levels: int,
        max_res: int,
        log2_hashmap_size: int,
        log2_dense_limit: Optional[int] = None,
        min_res: int = 16,
        features_per_level: int = 2,
    ) -> HashGridLayout:
        """The hash grid's layout for these arguments (as the constructor's)."""
        return HashGridLayout.from_resolutions(
            num_levels, min_res, max_res, log2_hashmap_size, features_per_level, log2_dense_limit
        )

    def unit_positions(self, positions: Float[Tensor, "n 3"]) -> Float[Tensor, "n 3"]:
        """World positions to hash-grid coordinates in ``[0, 1]^3`` (see :func:`grid_coordinates`)."""
        return grid_coordinates(positions, self.aabb, self.contract, self.grid_region)

    @property
    def reuses_encodings(self) -> bool:
        """Whether ``encodings`` handed to :meth:`density_head` save the hash encoding's forward."""
        return self.position_encoding.reuses_values

    def density_network(self, heads: bool = False) -> Optional[DensityNetwork]:
        """The density as the fused CPU culling kernel reads it (:mod:`~nerfstudio_accel.kernels.culling_numba`),
        where it runs this field's: the ``kernel`` hash backend on the CPU, a float32 table and the torch density
        MLP; None elsewhere (the culling pass then calls :meth:`density_head`). ``heads``: the kernel also computes
        the kept samples' :meth:`density_head` (else their raw density alone)."""
        mlp = self.density_mlp
        if (
            not fused_culling_reads(self.position_encoding.backend, self.aabb.device)
            or self.position_encoding.table.dtype != torch.float32
            or mlp.tcnn_encoding is not None
            or len(mlp.layers) != 2
            or not isinstance(mlp.activation, nn.ReLU)
            or mlp.out_activation is not None
        ):
            return None
        hidden, output = mlp.layers
        layout = self.position_encoding.layout
        weights = self.level_weights if self.level_weights is not None else torch.ones(layout.out_dim)
        return DensityNetwork(
            table=self.position_encoding.table.detach().reshape(-1, layout.features_per_level),
            levels=cached_level_tensors(layout, torch.device("cpu")),
            level_weights=weights.detach().float(),
            hidden_weight=hidden.weight.detach().t(),
            hidden_bias=hidden.bias.detach(),
            head_weight=output.weight.detach()[: None if heads else 1],
            head_bias=output.bias.detach()[: None if heads else 1],
            max_log_density=MAX_LOG_DENSITY,
            aabb=self.aabb,
            contract=self.contract,
            region=self.grid_region,
        )

    def encode(self, positions: Float[Tensor, "n 3"]) -> Float[Tensor, "n enc"]:
        """The hash encoding of world ``positions`` (the density MLP's input)."""
        return self.position_encoding(self.unit_positions(positions))

    def density_head(
        self, positions: Float[Tensor, "n 3"], encodings: Optional[Float[Tensor, "n enc"]] = None
    ) -> Float[Tensor, "n 16"]:
        """Pre-activation density (column 0) and geometry features (the rest, ``geo_feat_dim`` wide).
        ``encodings``: :meth:`encode` of the same positions from a no-grad pass this step, used as the
        encoding's forward values (its backward still runs, see :attr:`reuses_encodings`).
        No sample, no kernel call (tiny-cuda-nn fails on empty input)."""
        if positions.shape[0] == 0:
            return positions.new_zeros(0, 1 + self.geo_feat_dim)
        if encodings is None:
            encodings = self.encode(positions)
        elif torch.is_grad_enabled():
            encodings = self.position_encoding.with_values(self.unit_positions(positions), encodings)
        if self.level_weights is not None:
            encodings = encodings * self.level_weights.to(encodings)
        return self.density_mlp(encodings)

    def color_raw(
        self,
        geo_features: Float[Tensor, "n geo"],
        directions: Float[Tensor, "n 3"],
        camera_indices: Optional[Int[Tensor, " n"]] = None,
        positions: Optional[Float[Tensor, "n 3"]] = None,
        appearance: Optional[Float[Tensor, "n dim"]] = None,
    ) -> Float[Tensor, "n 3"]:
        """Pre-activation colour from geometry features, unit view ``directions`` and, with appearance
        embeddings, the training image each sample was seen from (empty in, empty out). ``positions``, where the
        samples are, is not needed by one field (a split scene's picks each sample's field by it).
        ``appearance``: each sample's appearance vector, required with ``shared_appearance`` (else unused)."""
        if directions.shape[0] == 0:
            return directions.new_zeros(0, 3)
        features = [self.encode_directions(directions).to(geo_features), geo_features]
        if self.appearance is not None:
            features.append(self.appearance_vectors(camera_indices, directions.shape[0]).to(geo_features))
        elif self.appearance_input:
            assert appearance is not None, "a field with shared appearance takes each sample's vector"
            features.append(appearance.to(geo_features))
        return self.color_mlp(torch.cat(features, dim=-1))

    def encode_directions(self, directions: Float[Tensor, "n 3"]) -> Float[Tensor, "n sh"]:
        """Spherical harmonics of unit view ``directions``: tiny-cuda-nn's (which take them mapped to ``[0, 1]^3``),
        else :func:`~nerfstudio_accel.ops.direction_encoding.spherical_harmonics` on the position encoding's
        backend."""
        if self.direction_encoding.tcnn_encoding is not None:
            return self.direction_encoding((directions + 1.0) / 2.0)
        backend = self.position_encoding.backend
        return spherical_harmonics(directions, self.direction_encoding.levels, backend=backend)

    def appearance_vectors(self, camera_indices: Optional[Int[Tensor, " n"]], n: int) -> Float[Tensor, "n dim"]:
        """Each sample's image embedding in training; the mean embedding otherwise (or without indices)."""
        assert self.appearance is not None
        return appearance_vectors(self.appearance, camera_indices, n, self.training)

    def field_raw(
        self,
        positions: Float[Tensor, "n 3"],
        directions: Float[Tensor, "n 3"],
        camera_indices: Optional[Int[Tensor, " n"]] = None,
        encodings: Optional[Float[Tensor, "n enc"]] = None,
        appearance: Optional[Float[Tensor, "n dim"]] = None,
    ) -> Tuple[Float[Tensor, "n 1"], Float[Tensor, "n 3"]]:
        """Pre-activation density ``sigma'`` and colour ``c'`` at points seen from unit ``directions``
        (``camera_indices``: the training image of each sample, for appearance embeddings; ``encodings``:
        as in :meth:`density_head`; ``appearance``: as in :meth:`color_raw`)."""
        head = self.density_head(positions, encodings)
        return head[:, :1], self.color_raw(head[:, 1:], directions, camera_indices, appearance=appearance)

    @staticmethod
    def activate(
        raw_density: Float[Tensor, "n 1"], raw_color: Float[Tensor, "n 3"]
    ) -> Tuple[Float[Tensor, "n 1"], Float[Tensor, "n 3"]]:
        """Density ``trunc_exp(sigma' - 1)`` (>= 0, per world unit) and colour ``sigmoid(c')`` in ``[0, 1]``."""
        return HashGridField.activate_density(raw_density), torch.sigmoid(raw_color.float())

    @staticmethod
    def activate_density(raw_density: Float[Tensor, "n 1"]) -> Float[Tensor, "n 1"]:
        """``trunc_exp(sigma' - 1)`` in fp32, the exponent capped at :data:`MAX_LOG_DENSITY` (a finite,
        fully opaque density: ``inf * 0`` on a zero-length interval would be nan)."""
        return trunc_exp(torch.clamp(raw_density.float() - 1.0, max=MAX_LOG_DENSITY))

    def density(self, positions: Float[Tensor, "n 3"]) -> Float[Tensor, "n 1"]:
        """Activated density only (grid updates and culling)."""
        return self.activate_density(self.density_head(positions)[:, :1])

"""BlockFields: one radiance field per cell of a spatially split scene, behind the single field's interface.

Every call routes each point to the field of its cell (:func:`~nerfstudio_accel.spatial.cells.cell_of`) and puts
the results back in the points' order, so a model, a density record or a sampler's grid update uses it as it
uses one :class:`~nerfstudio_accel.fields.hash_grid_field.HashGridField`. Each cell's field holds its own hash
table (one model's lattice over the whole box for an object scene, the contracted region of its cell for a
capture; docs/spatial_blocks.md) and its own MLPs; the per-image
appearance embedding (captures) is one, held here and shared by every cell's colour MLP, so an image's exposure is
one vector wherever its rays go.

A process holds every cell's field, or, training one block per rank, only its own cell's: that one then answers for
every point it is asked about (the rank samples only inside its cell). The fields are keyed by their cell's index,
so a rank's state dict is the part of the one-process state dict that names its cell.
"""

from __future__ import annotations

from typing import Callable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from nerfstudio_accel.errors import CheckpointError
from nerfstudio_accel.fields.hash_grid_field import HashGridField, appearance_vectors
from nerfstudio_accel.spatial.block_ranks import held_blocks
from nerfstudio_accel.spatial.cells import cell_of

APPEARANCE_GROUP = "appearance"
"""The optimizer group of the appearance embedding the blocks share (shared by the ranks, as the camera optimizer's
group is, when each trains one block)."""


def refuse_embeddings_per_block(state_dict: Mapping[str, Tensor], prefix: str, *_: object) -> None:
    """Raise :class:`~nerfstudio_accel.errors.CheckpointError` (one line) for a split capture's checkpoint whose blocks
    each hold their own appearance embedding (before the blocks shared one): loaded without them, nerfstudio's tools
    would render every block with a fresh embedding's mean, silently."""
    if any(name.startswith(f"{prefix}fields.") and name.endswith(".appearance.weight") for name in state_dict):
        raise CheckpointError(
            "this checkpoint is of a split capture whose blocks each hold their own appearance embedding (trained "
            "before the blocks shared one), which this version does not open; train it again with "
            "--pipeline.spatial-blocks"
        )


class BlockFields(nn.Module):
    """``fields[k]`` answers for the points in ``cells[k]`` (``(k, 2, 3)`` boxes tiling the scene box); ``fields``
    holds every cell's field (a sequence, or by cell index), or one cell's by its index (:attr:`own_block`).
    ``appearance``: the per-image embedding every cell's colour MLP reads (fields built with ``shared_appearance``);
    None: no appearance vectors."""

    color_raw_reads_positions = True
    """:meth:`color_raw` picks each sample's field by its position."""

    def __init__(
        self,
        fields: Union[Sequence[HashGridField], Mapping[int, HashGridField]],
        cells: Float[Tensor, "k 2 3"],
        appearance: Optional[nn.Embedding] = None,
    ) -> None:
        super().__init__()
        fields = held_blocks(fields, cells.shape[0], "field")
        self.held = sorted(fields)
        self.fields = nn.ModuleDict({str(k): fields[k] for k in self.held})
        self.appearance = appearance
        self._register_load_state_dict_pre_hook(refuse_embeddings_per_block)
        self.register_buffer("cells", cells.detach().clone().float())
        self.register_buffer("aabb", torch.stack([self.cells[:, 0].amin(dim=0), self.cells[:, 1].amax(dim=0)]))
        self.geo_feat_dim = self.field_list()[0].geo_feat_dim

    @property
    def own_block(self) -> Optional[int]:
        """The one cell whose field this process holds (one block per rank); None when it holds every cell's."""
        return self.held[0] if len(self.held) < self.cells.shape[0] else None

    def field_list(self) -> List[HashGridField]:
        """The fields held, in the order of their cells."""
        return list(self.fields.values())  # type: ignore[arg-type]

    activate = staticmethod(HashGridField.activate)
    activate_density = staticmethod(HashGridField.activate_density)

    @property
    def position_encoding(self):
        """The first cell's position encoding (every cell's has the same layout)."""
        return self.field_list()[0].position_encoding

    @property
    def level_weights(self) -> Optional[Tensor]:
        return self.field_list()[0].level_weights

    @level_weights.setter
    def level_weights(self, weights: Optional[Tensor]) -> None:
        for field in self.field_list():
            field.level_weights = weights

    @property
    def reuses_encodings(self) -> bool:
        return self.field_list()[0].reuses_encodings

    def density_network(self, heads: bool = False) -> None:
        """None: the fused culling kernel reads one field's density; a split scene's culling pass calls
        :meth:`density_head`, which sends each point to its cell's field."""
        return None

    def cell_rows(self, positions: Float[Tensor, "n 3"]) -> List[Int[Tensor, " m"]]:
        """Per cell held, the rows of ``positions`` in it (each row in exactly one cell); every row for
        :attr:`own_block`."""
        if self.own_block is not None:
            return [torch.arange(positions.shape[0], device=positions.device)]
        cells = cell_of(positions.detach(), self.cells)
        return [torch.nonzero(cells == k).reshape(-1) for k in self.held]

    def _per_cell(
        self, positions: Float[Tensor, "n 3"], width: int, call: Callable[[HashGridField, Tensor], Tensor]
    ) -> Tensor:
        """``call(field_k, rows_k)`` for every cell, each ``(m_k, width)``, back in the rows' order ``(n, width)``."""
        rows = self.cell_rows(positions)
        if self.own_block is not None:
            return call(self.field_list()[0], rows[0]).reshape(-1, width)
        parts = [call(field, cell_rows) for field, cell_rows in zip(self.field_list(), rows)]
        dtype = next((part.dtype for part in parts if part.numel()), positions.dtype)
        stacked = torch.cat([part.reshape(-1, width).to(dtype) for part in parts])
        return stacked[torch.argsort(torch.cat(rows))]  # one gather; autograd reaches every cell's field

    def encode(self, positions: Float[Tensor, "n 3"]) -> Float[Tensor, "n enc"]:
        """Each point's encoding by its cell's hash grid."""
        width = self.position_encoding.get_out_dim()
        return self._per_cell(positions, width, lambda field, rows: field.encode(positions[rows]))

    def density_head(
        self, positions: Float[Tensor, "n 3"], encodings: Optional[Float[Tensor, "n enc"]] = None
    ) -> Float[Tensor, "n head"]:
        """As :meth:`HashGridField.density_head`, by each point's cell."""
        return self._per_cell(
            positions,
            1 + self.geo_feat_dim,
            lambda field, rows: field.density_head(positions[rows], None if encodings is None else encodings[rows]),
        )

    def color_raw(
        self,
        geo_features: Float[Tensor, "n geo"],
        directions: Float[Tensor, "n 3"],
        camera_indices: Optional[Int[Tensor, " n"]] = None,
        positions: Optional[Float[Tensor, "n 3"]] = None,
    ) -> Float[Tensor, "n 3"]:
        """As :meth:`HashGridField.color_raw`, by the cell of each sample's ``positions`` (required here)."""
        assert positions is not None, "a split field picks each sample's colour MLP by its position"
        vectors = self._appearance_vectors(camera_indices, positions.shape[0])

        def color(field: HashGridField, rows: Tensor) -> Tensor:
            cameras = None if camera_indices is None else camera_indices[rows]
            shared = None if vectors is None else vectors[rows]
            return field.color_raw(geo_features[rows], directions[rows], cameras, appearance=shared)

        return self._per_cell(positions, 3, color)

    def _appearance_vectors(
        self, camera_indices: Optional[Int[Tensor, " n"]], n: int
    ) -> Optional[Float[Tensor, "n dim"]]:
        """Each of ``n`` samples' shared appearance vector (see :func:`appearance_vectors`); None without."""
        return (
            None if self.appearance is None else appearance_vectors(self.appearance, camera_indices, n, self.training)
        )

    def field_raw(
        self,
        positions: Float[Tensor, "n 3"],
        directions: Float[Tensor, "n 3"],
        camera_indices: Optional[Int[Tensor, " n"]] = None,
        encodings: Optional[Float[Tensor, "n enc"]] = None,
    ) -> Tuple[Float[Tensor, "n 1"], Float[Tensor, "n 3"]]:
        """As :meth:`HashGridField.field_raw`, by each point's cell."""
        vectors = self._appearance_vectors(camera_indices, positions.shape[0])

        def raw(field: HashGridField, rows: Tensor) -> Tensor:
            cameras = None if camera_indices is None else camera_indices[rows]
            known = None if encodings is None else encodings[rows]
            shared = None if vectors is None else vectors[rows]
            return torch.cat(field.field_raw(positions[rows], directions[rows], cameras, known, shared), dim=-1)

        out = self._per_cell(positions, 4, raw)
        return out[:, :1], out[:, 1:]

    def density(self, positions: Float[Tensor, "n 3"]) -> Float[Tensor, "n 1"]:
        """Activated density by each point's cell."""
        return self._per_cell(positions, 1, lambda field, rows: field.density(positions[rows]))

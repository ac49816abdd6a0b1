"""ProposalDensityField: the small density-only network that guides proposal sampling.

A coarse hash grid (few levels, small tables) and a one-hidden-layer MLP: it only has to say roughly
where along a ray the main field's density lies, so it is cheap enough to evaluate at a few hundred
points per ray. It sees space through the same contraction as the main field.
"""

from __future__ import annotations

from typing import Literal, Optional

from jaxtyping import Float
from nerfstudio.field_components.mlp import MLP
from torch import Tensor, nn

from nerfstudio_accel.encodings.hash_encoding import MultiresHashEncoding
from nerfstudio_accel.fields.hash_grid_field import HashGridField, grid_coordinates
from nerfstudio_accel.kernels.hash_layout import HashGridLayout


class ProposalDensityField(nn.Module):
    """Density ``(n, 1)`` (>= 0, per world unit) at world positions ``(n, 3)``.

    Args:
        aabb: scene box ``(2, 3)``; contract, grid_region: as :class:`HashGridField`.
        num_levels, max_res, log2_hashmap_size: the hash grid (min resolution 16, 2 features per level).
        hidden_dim: the MLP's width (one hidden layer).
        implementation, hash_backend: kernels, as :class:`HashGridField`.
    """

    def __init__(
        self,
        aabb: Float[Tensor, "2 3"],
        contract: bool,
        num_levels: int = 5,
        max_res: int = 128,
        log2_hashmap_size: int = 17,
        hidden_dim: int = 16,
        implementation: Literal["tcnn", "torch"] = "torch",
        hash_backend: Literal["torch", "kernel", "tcnn"] = "torch",
        grid_region: Optional[Float[Tensor, "2 3"]] = None,
    ) -> None:
        super().__init__()
        self.register_buffer("aabb", aabb.detach().clone().float())
        self.contract = contract
        self.grid_region: Optional[Tensor]
        self.register_buffer("grid_region", None if grid_region is None else grid_region.detach().clone().float())
        layout = HashGridLayout.from_resolutions(num_levels, 16, max_res, log2_hashmap_size, 2)
        self.position_encoding = MultiresHashEncoding(layout, backend=hash_backend)
        self.mlp = MLP(
            in_dim=self.position_encoding.get_out_dim(),
            num_layers=2,
            layer_width=hidden_dim,
            out_dim=1,
            activation=nn.ReLU(),
            implementation=implementation,
        )

    def forward(self, positions: Float[Tensor, "n 3"]) -> Float[Tensor, "n 1"]:
        if positions.shape[0] == 0:
            return positions.new_zeros(0, 1)
        raw = self.mlp(self.position_encoding(grid_coordinates(positions, self.aabb, self.contract, self.grid_region)))
        return HashGridField.activate_density(raw)

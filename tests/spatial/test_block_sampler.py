"""A split that changes nothing: with every cell's grid as occupied as the whole box's, the blocks' samples are the
whole-box sampler's samples (stratified or not), the density record hears the right rows, and a model split into
blocks that all hold the same field renders the image the unsplit model renders."""

from __future__ import annotations

import copy

import pytest
import torch
from nerfstudio.cameras.rays import RayBundle
from nerfstudio.data.scene_box import SceneBox

from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.methods import accel_ngp
from nerfstudio_accel.ops._torch_impl import render_transmittance_from_density
from nerfstudio_accel.sampling.base import DensityRecord, SamplerScene
from nerfstudio_accel.sampling.occupancy import OccupancySamplerConfig
from nerfstudio_accel.sampling.proposal import ProposalSamplerConfig
from nerfstudio_accel.spatial.block_field import BlockFields
from nerfstudio_accel.spatial.block_sampler import BlockSampler
from nerfstudio_accel.spatial.cells import cell_of, kd_cells

BOX = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])


def rays(n: int = 64, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    origins = 3.0 * torch.nn.functional.normalize(torch.randn(n, 3, generator=generator), dim=-1)
    targets = 0.6 * (torch.rand(n, 3, generator=generator) * 2 - 1)
    return origins, torch.nn.functional.normalize(targets - origins, dim=-1)


def ball(points: torch.Tensor) -> torch.Tensor:
    return 30.0 * torch.exp(-(points**2).sum(dim=-1, keepdim=True) / 0.2)


def fill(sampler) -> None:
    """Every grid occupied everywhere, warmed up."""
    for module in sampler.modules():
        if hasattr(module, "grid"):
            module.grid.binaries.fill_(True)
            module.grid.occs.fill_(1.0)
            module.warmed_up.fill_(True)


class Recording(DensityRecord):
    def __init__(self):
        self.points, self.rows = [], None

    def __call__(self, points):
        self.points.append(points)
        return ball(points)

    def drop_below(self, density):
        pass

    def keep(self, rows):
        self.rows = rows


def samplers(k: int, **options):
    config = OccupancySamplerConfig(backend="torch", resolution=16, **options)
    config.resolve("cpu", contract=False)
    scene = SamplerScene(BOX, False, 0.05, 100.0, torch.device("cpu"), "torch", "torch")
    cells = kd_cells(BOX, k)
    whole, split = config.setup(scene), BlockSampler(config.setup_cells(scene, cells), cells, 0.05, 100.0)
    fill(whole)
    fill(split)
    return whole, split


def test_the_viewer_figures_count_each_blocks_samples_per_ray():
    """The Accel panel's per-block samples per ray: rays inside the cell x < 0 take none from the other block; rays
    along x cross both cells, each holding about half of every ray's samples."""
    _, split = samplers(2, alpha_threshold=0.0, early_stop_eps=0.0)
    assert split.cell_boxes()[:, :, 0].tolist() == [[-1.0, 0.0], [0.0, 1.0]]
    n = 16
    inside = torch.stack([torch.linspace(-0.9, -0.1, n), torch.full((n,), -3.0), torch.zeros(n)], dim=-1)
    samples = split.sample(inside, torch.tensor([[0.0, 1.0, 0.0]]).expand(n, 3))
    figures = split.figures()
    assert figures["samples_per_ray_block_1"] == 0
    assert figures["samples_per_ray_block_0"] == samples.n_samples / n > 0
    across = torch.stack([torch.full((n,), -3.0), torch.linspace(-0.9, 0.9, n), torch.zeros(n)], dim=-1)
    samples = split.sample(across, torch.tensor([[1.0, 0.0, 0.0]]).expand(n, 3))
    front, back = split.figures()["samples_per_ray_block_0"], split.figures()["samples_per_ray_block_1"]
    assert front + back == pytest.approx(samples.n_samples / n) and front == pytest.approx(back, abs=1.0)


CULLING = {
    # id: (sampler options, density function)
    "marched": ({"alpha_threshold": 0.0, "early_stop_eps": 0.0}, None),
    "culled": ({}, ball),  # opacity and early stopping over the whole ray, across the cells it crosses
    "capped": ({"max_samples_per_ray": 250}, ball),  # per ray, not per block: 3840 kept here, not 13370
    "front-to-back rounds": ({"culling_first_samples": 4}, ball),
}


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("stratified", [False, True])
@pytest.mark.parametrize("culling", sorted(CULLING))
def test_the_blocks_samples_are_the_whole_boxs(k, stratified, culling):
    options, density_fn = CULLING[culling]
    whole, split = samplers(k, **options)
    origins, directions = rays()
    torch.manual_seed(7)
    expected = whole.sample(origins, directions, density_fn=density_fn, stratified=stratified)
    torch.manual_seed(7)
    actual = split.sample(origins, directions, density_fn=density_fn, stratified=stratified)
    assert expected.n_samples > 300
    assert torch.equal(actual.ray_indices, expected.ray_indices)
    assert torch.equal(actual.t_starts, expected.t_starts) and torch.equal(actual.t_ends, expected.t_ends)


def test_the_record_hears_the_rows_of_every_blocks_kept_samples():
    whole, split = samplers(3)
    origins, directions = rays(seed=1)
    record = Recording()
    samples = split.sample(origins, directions, density_fn=record)
    seen = torch.cat(record.points)
    assert 0 < samples.n_samples < seen.shape[0], "culling by opacity kept some"
    assert torch.allclose(seen[record.rows], samples.positions)
    without_transmittance_culling = samplers(3, early_stop_eps=0.0)
    expected = without_transmittance_culling[0].sample(origins, directions, density_fn=ball)
    actual = without_transmittance_culling[1].sample(origins, directions, density_fn=ball)
    assert torch.equal(actual.t_starts, expected.t_starts), "alpha culling is per sample: the same survivors"


class FloorRecording(Recording):
    """A record that holds the least density :meth:`drop_below` names."""

    def drop_below(self, density):
        self.floor = float(density)


@pytest.mark.parametrize("rounds", [0, 4])
def test_each_cell_culls_by_its_own_threshold_and_the_record_keeps_every_kept_row(rounds):
    """Cells whose grids differ in mean occupancy cap the opacity threshold differently (0.002, 0.01, 0.005); the
    survivors are the whole box's candidates with the transmittance of the whole ray and the threshold of their
    cell, and no kept row lies under the least density the record was told."""
    whole, split = samplers(3, culling_first_samples=rounds)
    for sampler, occupancy in zip(split.sampler_list(), (0.002, 1.0, 0.005)):
        sampler.grid.occs.fill_(occupancy)
    origins, directions = rays(seed=3)
    record = FloorRecording()
    samples = split.sample(origins, directions, density_fn=record)
    ray_indices, t_starts, t_ends = whole.march(origins, directions)
    positions = origins[ray_indices] + directions[ray_indices] * (0.5 * (t_starts + t_ends))[:, None]
    transmittance, alphas = render_transmittance_from_density(
        t_starts, t_ends, ball(positions).reshape(-1), ray_indices, origins.shape[0]
    )
    thresholds = torch.tensor([0.002, 0.01, 0.005])[cell_of(positions, kd_cells(BOX, 3))]
    kept = (transmittance >= 1e-4) & (alphas >= thresholds)
    assert torch.equal(samples.t_starts, t_starts[kept]) and torch.equal(samples.ray_indices, ray_indices[kept])
    assert bool(((alphas < 0.01) & (alphas >= thresholds) & kept).any()), "kept under the common threshold"
    seen = torch.cat(record.points)
    assert torch.allclose(seen[record.rows], samples.positions)
    assert float(ball(seen[record.rows]).min()) >= record.floor > 0


def models(**model_options):
    config = copy.deepcopy(accel_ngp.config.pipeline.model)
    config.log2_hashmap_size, config.num_levels, config.max_res = 12, 4, 64
    config.occupancy.resolution = 16
    for name, value in model_options.items():
        setattr(config.occupancy, name, value)
    built = []
    for blocks in (1, 2):
        own = copy.deepcopy(config)
        own.spatial_blocks = blocks
        own.resolve("cpu", SceneFacts(bounded=True, images_have_alpha=True))
        torch.manual_seed(0)
        built.append(own.setup(scene_box=SceneBox(aabb=BOX), num_train_data=1, metadata={}, device="cpu"))
    whole, split = built
    with torch.no_grad():  # a field with structure: densities from clear to opaque across the box
        whole.field.position_encoding.table.uniform_(-1.0, 1.0)
        [*_, last] = (layer for layer in whole.field.density_mlp.modules() if isinstance(layer, torch.nn.Linear))
        last.weight[0] *= 30.0
        last.bias[0] = -3.0
    split.field = BlockFields([whole.field, whole.field], split.field.cells)  # the same field in every cell
    for model in built:
        fill(model.sampler)
        model.eval()
    return whole, split


@pytest.mark.parametrize("culling", [{"early_stop_eps": 0.0}, {}])
def test_a_model_split_in_two_blocks_of_the_same_field_renders_the_unsplit_image(culling):
    """The same samples, composited in the same order: equal up to float rounding, with early stopping too."""
    whole, split = models(**culling)
    origins, directions = rays(256, seed=2)
    bundle = RayBundle(origins, directions, pixel_area=torch.ones(256, 1), camera_indices=torch.zeros(256, 1).long())
    with torch.no_grad():
        expected, actual = whole.get_outputs(bundle), split.get_outputs(bundle)
    opacity = expected["accumulation"]
    assert float(opacity.mean()) > 0.2 and float(opacity.std()) > 0.05, "a field with structure, not empty space"
    torch.testing.assert_close(actual["rgb"], expected["rgb"], rtol=0, atol=1e-6)
    torch.testing.assert_close(actual["accumulation"], expected["accumulation"], rtol=0, atol=1e-6)


def test_a_split_the_sampler_or_scene_cannot_take_stops_in_one_line():
    config = copy.deepcopy(accel_ngp.config.pipeline.model)
    config.spatial_blocks = 2
    grid_on_capture = copy.deepcopy(config)
    grid_on_capture.sampler = "occupancy"
    with pytest.raises(ConfigError, match="the occupancy sampler has no per-block form for a capture"):
        grid_on_capture.resolve("cpu", SceneFacts(bounded=False, images_have_alpha=None))
    distortion = copy.deepcopy(config)
    distortion.sampler, distortion.proposal.distortion_loss_mult = "proposal", 0.002
    with pytest.raises(ConfigError, match="the distortion loss over blocks is not built"):
        distortion.resolve("cpu", SceneFacts(bounded=False, images_have_alpha=None))
    for count in (0, 9):  # refused in one line, not by the hash backend's choice that runs first
        out_of_range = copy.deepcopy(config)
        out_of_range.spatial_blocks = count
        with pytest.raises(ConfigError, match="choose 1 to 8 blocks"):
            out_of_range.resolve("cpu", SceneFacts(bounded=True, images_have_alpha=None))
    for contract in (False, True):
        assert ProposalSamplerConfig().builds_blocks(contract)
        assert OccupancySamplerConfig().builds_blocks(contract) is not contract

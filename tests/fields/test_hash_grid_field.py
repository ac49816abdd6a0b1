"""HashGridField: grid coordinates with and without contraction, the density head fed with a no-grad pass's
encodings, appearance embeddings in training and evaluation, a capped density activation, empty inputs."""

from __future__ import annotations

import torch

from accel_test_helpers import field_pair
from nerfstudio_accel.fields.hash_grid_field import MAX_LOG_DENSITY, HashGridField, grid_coordinates

AABB = torch.tensor([[-1.0, -2.0, -1.0], [1.0, 2.0, 3.0]])


def small_field(**kwargs) -> HashGridField:
    torch.manual_seed(0)
    return HashGridField(AABB, num_levels=4, max_res=64, log2_hashmap_size=12, **kwargs)


def test_grid_coordinates_clamp_to_the_box_or_contract_space_around_it():
    inside = torch.tensor([[0.0, 0.0, 1.0], [1.0, 2.0, 3.0]])
    outside = torch.tensor([[5.0, 0.0, 1.0], [0.0, -1e6, 1.0]])
    assert torch.allclose(grid_coordinates(inside, AABB, False), torch.tensor([[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]]))
    assert torch.equal(
        grid_coordinates(outside, AABB, False), grid_coordinates(outside.clamp(AABB[0], AABB[1]), AABB, False)
    )
    contracted = grid_coordinates(torch.cat([inside, outside]), AABB, True)
    assert torch.allclose(contracted[:2], torch.tensor([[0.5, 0.5, 0.5], [0.75, 0.75, 0.75]]))
    assert bool(((contracted >= 0) & (contracted <= 1)).all())
    assert 0.75 < float(contracted[2, 0]) < 1.0 and float(contracted[3, 1]) < 1e-5, "far away tends to the cube's face"


def test_the_density_head_gives_the_same_values_and_gradients_from_a_no_grad_pass_encodings():
    field = small_field()
    positions = torch.rand(200, 3) * (AABB[1] - AABB[0]) + AABB[0]
    trained = [field.position_encoding.table, *field.density_mlp.parameters()]
    plain = field.density_head(positions)
    plain.square().sum().backward()
    expected = [parameter.grad.clone() for parameter in trained]
    field.zero_grad()
    with torch.no_grad():
        encodings = field.encode(positions)
    reused = field.density_head(positions, encodings)
    reused.square().sum().backward()
    assert torch.allclose(reused, plain)
    for got, want in zip((parameter.grad for parameter in trained), expected):
        torch.testing.assert_close(got, want)


def test_appearance_is_per_image_in_training_and_the_mean_outside():
    field = small_field(num_images=3, appearance_dim=4)
    geo = torch.randn(2, field.geo_feat_dim)
    directions = torch.nn.functional.normalize(torch.randn(1, 3), dim=-1).expand(2, 3)
    cameras = torch.tensor([0, 2])
    field.train()
    trained = field.color_raw(geo[:1].expand(2, -1), directions, cameras)
    assert not torch.allclose(trained[0], trained[1]), "two images, two appearances"
    field.eval()
    evaluated = field.color_raw(geo[:1].expand(2, -1), directions, cameras)
    assert torch.allclose(evaluated[0], evaluated[1])
    mean = field.appearance.weight.mean(dim=0)
    assert torch.allclose(field.appearance_vectors(cameras, 2), mean.expand(2, -1))


def test_density_activation_is_capped_finite_and_empty_inputs_make_no_call():
    densities = HashGridField.activate_density(torch.tensor([[-10.0], [1.0], [1e6], [float("inf")]]))
    assert bool(torch.isfinite(densities).all()) and bool((densities >= 0).all())
    assert float(densities[2]) == float(densities[3]) == torch.exp(torch.tensor(MAX_LOG_DENSITY)).item()
    field = small_field()
    assert field.density_head(torch.zeros(0, 3)).shape == (0, 1 + field.geo_feat_dim)
    assert field.color_raw(torch.zeros(0, field.geo_feat_dim), torch.zeros(0, 3)).shape == (0, 3)


def test_in_place_relus_give_the_gradients_of_out_of_place_ones():
    """The MLPs' ReLUs overwrite their layer's output; a backward through them equals one through copies."""
    in_place, copying = field_pair("kernel", "kernel")
    for mlp in (copying.density_mlp, copying.color_mlp):
        mlp.activation = torch.nn.ReLU()
    assert in_place.density_mlp.activation.inplace and in_place.color_mlp.activation.inplace
    positions = torch.rand(300, 3, generator=torch.Generator().manual_seed(1)) * 2 - 1
    directions = torch.nn.functional.normalize(torch.randn(300, 3, generator=torch.Generator().manual_seed(2)), dim=-1)
    for field in (in_place, copying):
        density, color = field.field_raw(positions, directions)
        (density.sum() + (color * torch.linspace(-1, 1, 3)).sum()).backward()
    for (name, ours), theirs in zip(in_place.named_parameters(), copying.parameters()):
        assert ours.grad is not None and ours.grad.abs().sum() > 0, name
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=0, atol=0, msg=name)

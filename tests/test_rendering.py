"""Packed fp32 rendering against nerfacc's batched (pure-torch) volume rendering, and backgrounds."""

from __future__ import annotations

import math

import pytest
import torch
from nerfacc import volrend

from nerfstudio_accel import rendering
from nerfstudio_accel.ops import _torch_impl
from nerfstudio_accel.sampling.packed import PackedSamples

N_RAYS, N_SAMPLES = 24, 40
CLOSE = dict(rtol=1e-5, atol=1e-6)


def batched_problem(seed: int) -> dict[str, torch.Tensor]:
    """``(n_rays, n_samples)`` float32 intervals (contiguous, from a random near plane), densities
    from transparent to opaque (one ray all empty), colours ``(n_rays, n_samples, 3)`` and a
    per-ray background."""
    generator = torch.Generator().manual_seed(seed)
    dt = 0.01 + 0.05 * torch.rand(N_RAYS, N_SAMPLES, generator=generator)
    t_ends = torch.rand(N_RAYS, 1, generator=generator) + torch.cumsum(dt, dim=1)
    sigmas = torch.exp(
        torch.randn(N_RAYS, 1, generator=generator) + 1.5 * torch.randn(N_RAYS, N_SAMPLES, generator=generator)
    )
    sigmas[3] = 0.0
    return {
        "t_starts": t_ends - dt,
        "t_ends": t_ends,
        "sigmas": sigmas,
        "colors": torch.rand(N_RAYS, N_SAMPLES, 3, generator=generator),
        "background": torch.rand(N_RAYS, 3, generator=generator),
    }


def packed(problem: dict[str, torch.Tensor]) -> PackedSamples:
    """The batched intervals as packed samples (row-major flatten)."""
    return PackedSamples(
        ray_indices=torch.arange(N_RAYS).repeat_interleave(N_SAMPLES),
        t_starts=problem["t_starts"].reshape(-1),
        t_ends=problem["t_ends"].reshape(-1),
        origins=torch.zeros(N_RAYS, 3),
        directions=torch.zeros(N_RAYS, 3),
    )


def nerfacc_batched_render(problem, sigmas, colors) -> dict[str, torch.Tensor]:
    """rgb / accumulation / depth / weights from nerfacc's batched functions, blended like ours."""
    t_starts, t_ends = problem["t_starts"], problem["t_ends"]
    weights, _, _ = volrend.render_weight_from_density(t_starts, t_ends, sigmas)
    accumulation = volrend.accumulate_along_rays(weights, None)
    rgb = volrend.accumulate_along_rays(weights, colors) + (1.0 - accumulation) * problem["background"]
    depth = volrend.accumulate_along_rays(weights, ((t_starts + t_ends) / 2)[..., None])
    depth = depth / torch.clamp(accumulation, min=1e-10)
    return {"rgb": rgb, "accumulation": accumulation, "depth": depth, "weights": weights.reshape(-1)}


def test_packed_transmittance_and_weights_match_nerfacc_batched():
    """The torch twins' packed transmittance, opacity and weights equal nerfacc's batched ones."""
    problem = batched_problem(seed=0)
    samples = packed(problem)
    sigmas = problem["sigmas"].reshape(-1)
    args = (samples.t_starts, samples.t_ends, sigmas, samples.ray_indices, N_RAYS)
    expected_weights, expected_trans, expected_alphas = volrend.render_weight_from_density(
        problem["t_starts"], problem["t_ends"], problem["sigmas"]
    )
    transmittance, alphas = _torch_impl.render_transmittance_from_density(*args)
    torch.testing.assert_close(transmittance, expected_trans.reshape(-1), **CLOSE)
    torch.testing.assert_close(alphas, expected_alphas.reshape(-1), **CLOSE)
    torch.testing.assert_close(_torch_impl.render_weight_from_density(*args), expected_weights.reshape(-1), **CLOSE)


@pytest.mark.parametrize("early_stop_eps, alpha_threshold", [(1e-4, 0.0), (1e-2, 0.05)])
def test_packed_visibility_matches_nerfacc_batched(early_stop_eps, alpha_threshold):
    """The torch twin's visibility mask equals nerfacc's batched one (and culls something)."""
    problem = batched_problem(seed=1)
    samples = packed(problem)
    visible = _torch_impl.render_visibility_from_density(
        samples.t_starts,
        samples.t_ends,
        problem["sigmas"].reshape(-1),
        samples.ray_indices,
        N_RAYS,
        early_stop_eps=early_stop_eps,
        alpha_threshold=alpha_threshold,
    )
    expected = volrend.render_visibility_from_density(
        problem["t_starts"],
        problem["t_ends"],
        problem["sigmas"],
        early_stop_eps=early_stop_eps,
        alpha_thre=alpha_threshold,
    ).reshape(-1)
    assert torch.equal(visible, expected)
    assert 0 < int(expected.sum()) < expected.numel()


@pytest.mark.parametrize("backend", ["torch", "kernel"])  # the twin's ops, and the CPU compositing kernel
def test_render_packed_matches_nerfacc_batched(backend):
    """rgb, accumulation, depth and weights of ``render_packed`` equal nerfacc's batched rendering."""
    problem = batched_problem(seed=2)
    result = rendering.render_packed(
        packed(problem),
        problem["sigmas"].reshape(-1, 1),
        problem["colors"].reshape(-1, 3),
        problem["background"],
        backend=backend,
    )
    expected = nerfacc_batched_render(problem, problem["sigmas"], problem["colors"])
    for key in ("rgb", "accumulation", "depth", "weights"):
        torch.testing.assert_close(result[key], expected[key], **CLOSE, msg=key)
    assert result["rgb"].shape == (N_RAYS, 3) and result["accumulation"].shape == result["depth"].shape == (N_RAYS, 1)


@pytest.mark.parametrize("backend", ["torch", "kernel"])
def test_render_packed_gradients_match_nerfacc_batched(backend):
    """Gradients of a loss on rgb, accumulation and depth w.r.t. densities and colours equal nerfacc's."""
    problem = batched_problem(seed=3)
    generator = torch.Generator().manual_seed(33)
    loss_weights = {
        key: torch.randn(N_RAYS, channels, generator=generator)
        for key, channels in (("rgb", 3), ("accumulation", 1), ("depth", 1))
    }

    def gradients(render):
        sigmas = problem["sigmas"].clone().requires_grad_(True)
        colors = problem["colors"].clone().requires_grad_(True)
        out = render(sigmas, colors)
        loss = sum((out[key] * weight).sum() for key, weight in loss_weights.items())
        return torch.autograd.grad(loss, (sigmas, colors))

    ours = gradients(
        lambda s, c: rendering.render_packed(
            packed(problem), s.reshape(-1, 1), c.reshape(-1, 3), problem["background"], backend=backend
        )
    )
    theirs = gradients(lambda s, c: nerfacc_batched_render(problem, s, c))
    torch.testing.assert_close(ours[0], theirs[0], **CLOSE, msg="d/d sigmas")
    torch.testing.assert_close(ours[1], theirs[1], **CLOSE, msg="d/d colours")
    assert ours[0].abs().sum() > 0


def test_render_packed_is_fp32_under_bfloat16_autocast():
    """bfloat16 field outputs under CPU autocast are composited in fp32: float32 results equal to
    rendering the same values upcast outside autocast."""
    problem = batched_problem(seed=4)
    densities = problem["sigmas"].reshape(-1, 1).bfloat16()
    colors = problem["colors"].reshape(-1, 3).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        result = rendering.render_packed(packed(problem), densities, colors, problem["background"])
    expected = rendering.render_packed(packed(problem), densities.float(), colors.float(), problem["background"])
    for key in ("rgb", "accumulation", "depth", "weights"):
        assert result[key].dtype == torch.float32, key
        torch.testing.assert_close(result[key], expected[key], rtol=0, atol=1e-6, msg=key)


def test_rays_without_samples_render_the_background():
    """A ray with no samples has rgb equal to its background, zero accumulation and zero depth;
    a batch with no samples at all is all background."""
    problem = batched_problem(seed=5)
    full = packed(problem)
    keep = full.ray_indices != 5
    samples = full.subset(keep)
    result = rendering.render_packed(
        samples, problem["sigmas"].reshape(-1, 1)[keep], problem["colors"].reshape(-1, 3)[keep], problem["background"]
    )
    assert torch.equal(result["rgb"][5], problem["background"][5])
    assert result["accumulation"][5].item() == 0.0 and result["depth"][5].item() == 0.0

    nothing = full.subset(torch.zeros(0, dtype=torch.long))
    empty = rendering.render_packed(nothing, torch.zeros(0, 1), torch.zeros(0, 3), problem["background"])
    assert torch.equal(empty["rgb"], problem["background"])
    assert not empty["accumulation"].any() and empty["weights"].shape == (0,)


# ---------------------------------------------------------------------------------------------
# Backgrounds
# ---------------------------------------------------------------------------------------------


def test_random_background_in_training_is_per_ray():
    """Training with ``random``: one colour per ray, in [0, 1], different across rays."""
    torch.manual_seed(0)
    colors = rendering.background_colors("random", 64, torch.device("cpu"), training=True)
    assert colors.shape == (64, 3)
    assert bool(((colors >= 0) & (colors <= 1)).all())
    assert torch.unique(colors, dim=0).shape[0] == 64


@pytest.mark.parametrize(
    "mode, training, expected",
    [
        ("random", False, (1.0, 1.0, 1.0)),
        ("white", True, (1.0, 1.0, 1.0)),
        ("white", False, (1.0, 1.0, 1.0)),
        ("black", True, (0.0, 0.0, 0.0)),
        ("black", False, (0.0, 0.0, 0.0)),
    ],
)
def test_fixed_backgrounds(mode, training, expected):
    """Evaluation with ``random`` uses white; ``white`` and ``black`` are fixed in both phases."""
    colors = rendering.background_colors(mode, 5, torch.device("cpu"), training=training)
    assert torch.equal(colors, torch.tensor(expected).expand(5, 3))


def test_rgba_targets_are_composited_over_the_given_background():
    """alpha 0 gives the background, alpha 1 the target colour, partial alpha the linear blend."""
    rgb = torch.tensor([[0.2, 0.4, 0.6], [0.9, 0.1, 0.3], [0.5, 0.5, 1.0]])
    alpha = torch.tensor([[0.0], [1.0], [0.25]])
    background = torch.tensor([[0.7, 0.8, 0.9], [0.0, 1.0, 0.5], [0.0, 0.0, 0.0]])
    result = rendering.composite_ground_truth(torch.cat([rgb, alpha], dim=-1), background)
    assert torch.equal(result[0], background[0])
    assert torch.equal(result[1], rgb[1])
    torch.testing.assert_close(result[2], 0.25 * rgb[2] + 0.75 * background[2])


def test_rgb_targets_pass_through():
    """Targets without alpha are returned unchanged, whatever the background."""
    image = torch.rand(4, 6, 3, generator=torch.Generator().manual_seed(6))
    assert torch.equal(rendering.composite_ground_truth(image, torch.rand(4, 6, 3)), image)


def test_depth_over_background_puts_empty_rays_on_a_wall_beyond_the_scene_box():
    """An empty ray ends on the wall (distance to the box's centre plus its half diagonal), an opaque
    ray keeps its depth, and a half-transparent one lies halfway between."""
    aabb = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])  # a SceneBox.aabb
    origins = torch.tensor([[0.0, 0.0, 4.0], [3.0, 0.0, 4.0], [0.0, 0.0, -2.0]])
    depth = torch.tensor([[0.0], [4.0], [1.5]])
    accumulation = torch.tensor([[0.0], [1.0], [0.5]])
    result = rendering.depth_over_background(depth, accumulation, origins, aabb)
    wall = 4.0 + math.sqrt(3.0), 2.0 + math.sqrt(3.0)
    torch.testing.assert_close(result, torch.tensor([[wall[0]], [4.0], [0.5 * 1.5 + 0.5 * wall[1]]]))

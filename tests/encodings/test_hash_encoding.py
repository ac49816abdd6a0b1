"""The hash encoding's backends against the pure-torch reference: values, table and point gradients,
the table layout, checkpoints, and (on a GPU) the Triton kernels and tiny-cuda-nn through the module."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.encodings.hash_encoding import MultiresHashEncoding
from nerfstudio_accel.errors import CheckpointError
from nerfstudio_accel.kernels import hash_encoding_numba
from nerfstudio_accel.kernels.hash_layout import HashGridLayout
from nerfstudio_accel.ops import backends, hash_encoding

LAYOUTS = {
    # name: (levels, min_res, max_res, log2_hashmap_size, features[, log2_dense_limit])
    "ngp-16-levels": (16, 16, 2048, 14, 2),
    "block-dense-levels": (6, 16, 256, 12, 2, 15),  # level 1 (28^3 vertices) dense above its 2^12 rows
    "all-dense": (3, 2, 12, 12, 2),
    "all-hashed": (2, 64, 512, 6, 2),
    "one-level-4-features": (1, 20, 20, 10, 4),
    "one-feature": (5, 8, 300, 12, 1),
}


def layout_of(name: str) -> HashGridLayout:
    levels, min_res, max_res, log2_size, features, *dense_limit = LAYOUTS[name]
    return HashGridLayout.from_resolutions(levels, min_res, max_res, log2_size, features, *dense_limit)


def probe_points(count: int, seed: int) -> torch.Tensor:
    """Random points, the cube's corners, points on its faces, and points outside it."""
    generator = torch.Generator().manual_seed(seed)
    inside = torch.rand(count, 3, generator=generator)
    corners = torch.tensor([[x, y, z] for x in (0.0, 1.0) for y in (0.0, 1.0) for z in (0.0, 1.0)])
    on_faces = torch.rand(12, 3, generator=generator)
    on_faces[torch.arange(12), torch.arange(12) % 3] = (torch.arange(12) % 2).float()
    outside = torch.rand(8, 3, generator=generator) * 3.0 - 1.0
    return torch.cat([inside, corners, on_faces, outside])


def reference_and_fused(layout: HashGridLayout, points: torch.Tensor, seed: int):
    """(values, table grad, point grad) of the reference and of the fused kernel for one random upstream."""
    generator = torch.Generator().manual_seed(seed)
    table = torch.rand(layout.num_params, generator=generator) * 2 - 1
    upstream = torch.randn(points.shape[0], layout.out_dim, generator=generator)
    results = []
    for backend in ("torch", "kernel"):
        encoding = MultiresHashEncoding(layout, backend)
        with torch.no_grad():
            encoding.table.copy_(table)
        inputs = points.clone().requires_grad_(True)
        values = encoding(inputs)
        (values * upstream).sum().backward()
        results.append((values.detach(), encoding.table.grad, inputs.grad))
    return results


def assert_close_relative(actual: torch.Tensor, expected: torch.Tensor, tolerance: float = 1e-5) -> None:
    """Equal to ``tolerance`` relative to the largest magnitude (point gradients scale with the resolution)."""
    scale = max(1.0, float(expected.detach().abs().max()))
    torch.testing.assert_close(actual, expected, rtol=0.0, atol=tolerance * scale)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layout_matches_tiny_cuda_nn_rules(name):
    """Levels are dense while their grid fits, rows are a multiple of 8 capped at 2^log2, in one table; with a
    dense limit, a level of at most 2^limit vertices is dense above the cap."""
    layout = layout_of(name)
    offsets = layout.level_offsets
    limit = max(layout.log2_hashmap_size, layout.log2_dense_limit or 0)
    for level in range(layout.num_levels):
        resolution = layout.level_resolution(level)
        rows = offsets[level + 1] - offsets[level]
        assert rows % 8 == 0 and rows <= max(2**layout.log2_hashmap_size, -(-(resolution**3) // 8) * 8)
        assert layout.level_is_dense(level) == (resolution**3 <= 2**limit)
        assert layout.level_is_dense(level) == (resolution**3 <= rows)
        assert resolution == int(torch.tensor(layout.level_scale(level)).ceil()) + 1
    assert layout.num_params == offsets[-1] * layout.features_per_level
    assert MultiresHashEncoding(layout).table.shape == (layout.num_params,)


def test_layout_numbers_worked_out_by_hand_from_tiny_cuda_nn():
    """16 * 2^l - 1 = 15, 31, 63, 127 -> 16, 32, 64, 128 vertices per axis; rows min(res^3, 2^19):
    the last level hashes; vertex (1, 1, 1) there lands in row (1 ^ 2654435761 ^ 805459861) mod 2^19."""
    from nerfstudio_accel.ops._hash_encoding_torch import corner_rows

    layout = HashGridLayout(
        num_levels=4, features_per_level=2, log2_hashmap_size=19, base_resolution=16, per_level_scale=2.0
    )
    assert layout.level_offsets == (0, 4096, 36864, 299008, 823296)
    assert [layout.level_is_dense(level) for level in range(4)] == [True, True, True, False]
    assert int(corner_rows(torch.tensor([[[1, 1, 1]]]), layout, 3)) == 339493
    assert int(corner_rows(torch.tensor([[[3, 2, 1]]]), layout, 1)) == 3 + 2 * 32 + 1 * 32 * 32


def test_layouts_cover_dense_and_hashed_levels():
    kinds = {
        name: {layout_of(name).level_is_dense(level) for level in range(layout_of(name).num_levels)} for name in LAYOUTS
    }
    assert kinds["all-dense"] == {True} and kinds["all-hashed"] == {False} and kinds["ngp-16-levels"] == {True, False}


def test_a_dense_limit_keeps_the_larger_tables_dense_levels_and_the_smaller_tables_hashed_rows():
    """A block's layout (2^14 rows, dense limit 2^15) against one model's (2^15): the same dense levels with the same
    rows, every hashed level half the rows; without the limit, level 2 (31^3 vertices) would hash."""
    one_model = HashGridLayout.from_resolutions(16, 16, 2048, 15)
    block = HashGridLayout.from_resolutions(16, 16, 2048, 14, log2_dense_limit=15)
    plain_block = HashGridLayout.from_resolutions(16, 16, 2048, 14)
    for level in range(16):
        assert block.level_is_dense(level) == one_model.level_is_dense(level)
        expected = one_model.level_entries(level) if one_model.level_is_dense(level) else 2**14
        assert block.level_entries(level) == expected
    assert [one_model.level_is_dense(level) for level in range(4)] == [True, True, True, False]
    assert plain_block.level_is_dense(2) is False
    assert one_model.tcnn_builds and plain_block.tcnn_builds and not block.tcnn_builds
    cuda_block = HashGridLayout.from_resolutions(16, 16, 2048, 18, log2_dense_limit=19)  # no level between the two
    assert cuda_block.tcnn_builds and cuda_block == HashGridLayout.from_resolutions(16, 16, 2048, 18, 2, 19)
    assert cuda_block.num_params == HashGridLayout.from_resolutions(16, 16, 2048, 18).num_params
    with pytest.raises(ValueError, match="log2_dense_limit"):
        HashGridLayout.from_resolutions(4, 16, 128, 14, log2_dense_limit=13)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_fused_cpu_kernel_matches_reference(name):
    """Values, table gradient and point gradient of the numba kernels equal the torch reference to 1e-5."""
    layout = layout_of(name)
    points = probe_points(2000, seed=1)
    (ref_values, ref_table, ref_points), (values, table_grad, point_grad) = reference_and_fused(layout, points, seed=2)
    assert_close_relative(values, ref_values)
    assert_close_relative(table_grad, ref_table)
    assert_close_relative(point_grad, ref_points)
    assert ref_table.abs().sum() > 0 and ref_points.abs().sum() > 0  # the comparison is not of zeros


@pytest.mark.parametrize("backend", ["torch", "kernel"])
def test_known_values_give_the_same_forward_and_gradients_as_encoding_again(backend):
    """with_values (the graph forward reusing a no-grad pass's encodings): same values, table gradient and
    point gradient as a second forward; the kernel backend does not run its forward kernel again."""
    layout = layout_of("ngp-16-levels")
    encoding = MultiresHashEncoding(layout, backend)
    with torch.no_grad():
        encoding.table.uniform_(-1.0, 1.0)
    points = probe_points(500, seed=3)
    upstream = torch.randn(points.shape[0], layout.out_dim, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        known = encoding(points)
    results = []
    for reuse in (False, True):
        encoding.table.grad = None
        inputs = points.clone().requires_grad_(True)
        values = encoding.with_values(inputs, known) if reuse else encoding(inputs)
        (values * upstream).sum().backward()
        results.append((values.detach(), encoding.table.grad.clone(), inputs.grad))
    for reused, again in zip(results[1], results[0]):
        assert_close_relative(reused, again)
    assert results[1][1].abs().sum() > 0 and results[1][2].abs().sum() > 0
    assert encoding.reuses_values == (backend == "kernel")


def test_known_values_skip_the_fused_forward_kernel(monkeypatch):
    """The kernel backend's with_values runs the backward kernel only: no second forward."""
    encoding = MultiresHashEncoding(layout_of("ngp-16-levels"), "kernel")
    points = probe_points(200, seed=5)
    calls = []
    forward = hash_encoding_numba.encode_forward
    monkeypatch.setattr(hash_encoding_numba, "encode_forward", lambda *args: calls.append(1) or forward(*args))
    with torch.no_grad():
        known = encoding(points)
    assert len(calls) == 1
    encoding.with_values(points.clone().requires_grad_(True), known).sum().backward()
    assert len(calls) == 1 and encoding.table.grad.abs().sum() > 0


def test_points_outside_the_cube_encode_as_clamped_and_get_no_gradient():
    layout = layout_of("ngp-16-levels")
    encoding = MultiresHashEncoding(layout, "kernel")
    outside = torch.tensor([[-0.5, 0.3, 1.7], [2.0, -1.0, 0.5]], requires_grad=True)
    values = encoding(outside)
    torch.testing.assert_close(values, encoding(outside.detach().clamp(0, 1)))
    values.sum().backward()
    torch.testing.assert_close(outside.grad[0], torch.tensor([0.0, outside.grad[0, 1].item(), 0.0]))
    assert outside.grad[0, 1] != 0  # the coordinate inside the cube still has a gradient


@pytest.mark.parametrize("backend", ["torch", "kernel"])
def test_nan_points_encode_as_the_origin_and_stay_inside_the_table(backend):
    """A NaN coordinate (a diverged sample) reads as 0 in every backend: no row outside its level."""
    encoding = MultiresHashEncoding(layout_of("ngp-16-levels"), backend)
    points = torch.tensor([[float("nan"), 0.5, 0.5], [0.0, 0.5, 0.5]], requires_grad=True)
    values = encoding(points)
    torch.testing.assert_close(values[0], values[1])
    values.sum().backward()
    assert torch.isfinite(encoding.table.grad).all() and torch.isfinite(points.grad).all()


def test_checkpoint_of_another_grid_shape_is_refused_in_one_line():
    """A table of another size (another layout) stops in one line rather than torch's size-mismatch trace, which
    nerfstudio's loader would retry and raise again."""
    encoding = MultiresHashEncoding(layout_of("block-dense-levels"))
    smaller = MultiresHashEncoding(HashGridLayout.from_resolutions(6, 16, 256, 12, 2))
    with pytest.raises(CheckpointError) as refused:
        encoding.load_state_dict(smaller.state_dict())
    message = str(refused.value)
    assert "\n" not in message and str(smaller.table.numel()) in message and str(encoding.table.numel()) in message
    encoding.load_state_dict(MultiresHashEncoding(layout_of("block-dense-levels")).state_dict())  # its own shape loads


def test_checkpoint_in_nerfstudios_old_layout_is_refused_in_one_line():
    encoding = MultiresHashEncoding(layout_of("all-dense"))
    with pytest.raises(CheckpointError) as refused:
        encoding.load_state_dict({"hash_table": torch.zeros(10, 2)})
    message = str(refused.value)
    assert "\n" not in message and "hash_table" in message and "retrain" in message


@pytest.mark.parametrize("backend", ["torch", "kernel"])
def test_no_points_give_empty_features_and_zero_gradient(backend):
    layout = layout_of("ngp-16-levels")
    encoding = MultiresHashEncoding(layout, backend)
    points = torch.zeros(0, 3, requires_grad=True)
    values = encoding(points)
    assert values.shape == (0, layout.out_dim)
    values.sum().backward()
    assert encoding.table.grad is not None and not encoding.table.grad.any()


def test_table_gradient_without_point_gradient_when_points_need_none():
    """The fused backward skips the point gradient (a separate kernel) unless the points require it."""
    layout = layout_of("one-feature")
    encoding = MultiresHashEncoding(layout, "kernel")
    points = torch.rand(50, 3)
    encoding(points).sum().backward()
    assert points.grad is None and encoding.table.grad.abs().sum() > 0


def test_state_dict_moves_between_backends():
    """One table tensor under one key: a kernel encoding's state loads into a torch one and encodes the same."""
    layout = layout_of("ngp-16-levels")
    source = MultiresHashEncoding(layout, "kernel")
    with torch.no_grad():
        source.table.uniform_(-1, 1)
    target = MultiresHashEncoding(layout, "torch")
    target.load_state_dict(source.state_dict())
    assert list(source.state_dict()) == ["table"]
    points = probe_points(500, seed=3)
    assert_close_relative(target(points), source(points))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["ngp-16-levels", "all-dense", "one-level-4-features"])
def test_triton_kernel_on_cuda_matches_reference(name):
    layout = layout_of(name)
    points = probe_points(4000, seed=7).cuda()
    generator = torch.Generator().manual_seed(8)
    table = (torch.rand(layout.num_params, generator=generator) * 2 - 1).cuda()
    upstream = torch.randn(points.shape[0], layout.out_dim, generator=generator).cuda()
    outputs = []
    for backend in ("torch", "kernel"):
        encoding = MultiresHashEncoding(layout, backend).cuda()
        with torch.no_grad():
            encoding.table.copy_(table)
        inputs = points.clone().requires_grad_(True)
        values = encoding(inputs)
        (values * upstream).sum().backward()
        outputs.append((values.detach(), encoding.table.grad, inputs.grad))
    for actual, expected in zip(outputs[1], outputs[0]):
        assert_close_relative(actual, expected, tolerance=1e-4)  # float atomics add in another order


@pytest.mark.skipif(bool(backends.tcnn_encoding_unavailable_reason("cuda")), reason="needs tiny-cuda-nn on CUDA")
def test_tiny_cuda_nn_reads_the_same_table():
    """tiny-cuda-nn's HashGrid on our table encodes as the reference does (its layout is ours)."""
    layout = layout_of("ngp-16-levels")
    tcnn_encoding = MultiresHashEncoding(layout, "tcnn").cuda()
    reference = MultiresHashEncoding(layout, "torch").cuda()
    reference.load_state_dict(tcnn_encoding.state_dict())
    points = torch.rand(4000, 3, device="cuda")
    torch.testing.assert_close(tcnn_encoding(points), reference(points), atol=1e-3, rtol=1e-2)  # tcnn computes in fp16


@pytest.mark.parametrize("variant", ["point gradients", "float16 outputs"])
def test_a_kernel_variant_that_fails_falls_back_to_the_reference_with_one_warning(variant, monkeypatch, caplog):
    """Pose refinement needs the backward kernel's point-gradient variant, autocast on CUDA the half-output one.
    Where one of them fails (simulated on the numba kernels) while the plain one runs, the calls that need it
    encode with the torch reference after one warning naming the variant and the reason; the others stay on the
    kernel."""
    from nerfstudio_accel.ops._hash_encoding_torch import encode_torch

    forward, backward = hash_encoding_numba.encode_forward, hash_encoding_numba.encode_backward

    def failing_forward(points, rows, levels, out_dtype=torch.float32):
        if out_dtype == torch.float16:
            raise RuntimeError("no half stores here\nsecond line")
        return forward(points, rows, levels, out_dtype)

    def failing_backward(points, rows, grad_out, levels, point_grad):
        if point_grad:
            raise RuntimeError("no point gradients here\nsecond line")
        return backward(points, rows, grad_out, levels, point_grad)

    monkeypatch.setattr(hash_encoding_numba, "encode_forward", failing_forward)
    monkeypatch.setattr(hash_encoding_numba, "encode_backward", failing_backward)
    if variant == "float16 outputs":  # as under CUDA autocast
        monkeypatch.setattr(hash_encoding, "_output_dtype", lambda points: torch.float16)
    hash_encoding.kernel_unavailable_reason.cache_clear()  # probed again with the failing kernels, and after them
    hash_encoding.kernel_variant_runs.cache_clear()
    layout = layout_of("all-dense")
    encoding = MultiresHashEncoding(layout, backend="kernel")
    points = probe_points(40, seed=3)
    try:
        with caplog.at_level("WARNING"):
            for _ in range(2):
                posed = points.clone().requires_grad_(variant == "point gradients")
                values = encoding(posed)
                (values.float() * torch.linspace(-1, 1, values.shape[1])).sum().backward()
        reference_points = points.clone().requires_grad_(variant == "point gradients")
        reference = encode_torch(reference_points.clamp(0.0, 1.0), encoding.table, layout)
        table_grad = encoding.table.grad.clone()
        encoding.table.grad = None
        (reference * torch.linspace(-1, 1, values.shape[1])).sum().backward()
        assert torch.equal(values.float(), reference.detach()) and torch.equal(table_grad, 2 * encoding.table.grad)
        if variant == "point gradients":
            assert torch.equal(posed.grad, reference_points.grad)
            plain = encoding(points)  # no point gradient needed: the kernel still runs
            assert not torch.equal(plain, reference.detach()) and torch.allclose(plain, reference, atol=1e-6)
    finally:
        hash_encoding.kernel_unavailable_reason.cache_clear()
        hash_encoding.kernel_variant_runs.cache_clear()
    warnings = [record.getMessage() for record in caplog.records if "hash-encoding kernel" in record.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    reason = "no point gradients here" if variant == "point gradients" else "no half stores here"
    assert variant in warnings[0] and reason in warnings[0] and "torch reference" in warnings[0], warnings

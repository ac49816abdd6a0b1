"""The hash-encoding op on each backend against its torch twin: values, table gradient and point gradient, and
the ``known`` values a no-grad pass computed. ``kernel`` is numba for CPU tensors and Triton for CUDA ones (Triton's
source also runs on CPU tensors under its interpreter: ``tests/kernels/test_hash_encoding_triton.py``); ``tcnn``
computes in fp16. The module around the op: ``tests/encodings/test_hash_encoding.py``."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from nerfstudio_accel.encodings.hash_encoding import MultiresHashEncoding
from nerfstudio_accel.errors import BackendUnavailable
from nerfstudio_accel.kernels import hash_encoding_numba
from nerfstudio_accel.kernels.hash_layout import HashGridLayout
from nerfstudio_accel.ops._hash_encoding_torch import encode_torch
from nerfstudio_accel.ops.backends import tcnn_encoding_unavailable_reason
from nerfstudio_accel.ops.hash_encoding import hash_encode, tcnn_hash_grid

LAYOUT = HashGridLayout.from_resolutions(8, 16, 512, 12, features_per_level=2)  # dense and hashed levels
BACKENDS = {
    # id: (backend, device, relative tolerance)
    "kernel-cpu": ("kernel", "cpu", 1e-5),
    "kernel-cuda": ("kernel", "cuda", 1e-4),  # float atomics add in another order
    "tcnn-cuda": ("tcnn", "cuda", 1e-2),  # tiny-cuda-nn computes in fp16
}


def device_for(backend: str, device: str) -> torch.device:
    """``device``, or a skip saying why this backend cannot run here."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"the {backend} backend on CUDA tensors needs a CUDA GPU")
    reason = tcnn_encoding_unavailable_reason(device) if backend == "tcnn" else ""
    if reason:
        pytest.skip(reason)
    return torch.device(device)


def encoded(backend: str, device: torch.device, points: torch.Tensor, table: torch.Tensor, upstream: torch.Tensor):
    """Values, table gradient and point gradient of ``hash_encode`` on ``backend``, back on the CPU."""
    points = points.detach().to(device).requires_grad_(True)  # a leaf on every device, the CPU's too
    table = torch.nn.Parameter(table.detach().to(device))
    grid = tcnn_hash_grid(LAYOUT) if backend == "tcnn" else None
    values = hash_encode(points, table, LAYOUT, backend, tcnn_grid=grid)
    (values.float() * upstream.to(device)).sum().backward()
    return values.detach().float().cpu(), table.grad.cpu(), points.grad.cpu()


def problem(seed: int):
    """Points inside the unit cube and a few outside it (clamped), a random table and upstream gradient."""
    generator = torch.Generator().manual_seed(seed)
    points = torch.cat([torch.rand(500, 3, generator=generator), torch.rand(8, 3, generator=generator) * 3 - 1])
    table = torch.rand(LAYOUT.num_params, generator=generator) * 2 - 1
    return points, table, torch.randn(points.shape[0], LAYOUT.out_dim, generator=generator)


@pytest.mark.parametrize("features", [1, 3, 4])
def test_cpu_kernel_gives_the_twins_features_at_any_width(features):
    """The numba kernel sums a level's features two at a time in registers: one, an odd number or two pairs per
    level give the twin's values (to float32 rounding, as at two), on dense and hashed levels."""
    layout = HashGridLayout.from_resolutions(8, 16, 512, 12, features_per_level=features)
    generator = torch.Generator().manual_seed(features)
    points = torch.rand(500, 3, generator=generator)
    table = torch.rand(layout.num_params, generator=generator) * 2 - 1
    expected = encode_torch(points, table, layout)
    assert expected.shape == (500, 8 * features) and expected.abs().amax(dim=0).min() > 0.1  # no feature left empty
    torch.testing.assert_close(hash_encode(points, table, layout, "kernel"), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_backend_matches_the_twin(name):
    backend, device, tolerance = BACKENDS[name]
    on = device_for(backend, device)
    points, table, upstream = problem(seed=1)
    expected = encoded("torch", torch.device("cpu"), points, table, upstream)
    for actual, want in zip(encoded(backend, on, points, table, upstream), expected):
        scale = max(1.0, float(want.abs().max()))  # point gradients scale with the resolution
        torch.testing.assert_close(actual, want, rtol=0.0, atol=tolerance * scale)
    assert expected[1].abs().sum() > 0 and expected[2].abs().sum() > 0  # the comparison is not of zeros


def test_the_table_gradient_kernel_overwrites_whatever_its_fresh_buffer_held(monkeypatch):
    """The numba kernel zeroes each level's rows itself (no separate fill of the table-sized buffer): called
    directly (the op's probe would fall back to the twin), buffers that come back full of NaN still give the twin's
    table gradient."""
    points, table, upstream = problem(seed=3)
    expected = encoded("torch", torch.device("cpu"), points, table, upstream)[1]
    empty_like = torch.empty_like
    monkeypatch.setattr(torch, "empty_like", lambda *args, **kwargs: empty_like(*args, **kwargs).fill_(float("nan")))
    rows = table.view(-1, LAYOUT.features_per_level)
    clamped = points.clamp(0.0, 1.0)  # as the op hands points to the kernels
    grad_rows, _ = hash_encoding_numba.encode_backward(
        clamped, rows, upstream, LAYOUT.level_tensors(clamped.device), False
    )
    assert torch.isfinite(grad_rows).all() and expected.abs().sum() > 0
    torch.testing.assert_close(
        grad_rows.view(-1), expected, rtol=0.0, atol=1e-5 * max(1.0, float(expected.abs().max()))
    )


def test_the_kernels_lattice_cell_is_the_floor_and_its_fraction_also_at_integers_and_below_zero():
    """The numba kernels' inline floor (a truncation moved down) gives the twin's vertex and fraction for positions
    that are integers, just under or over one, zero, negative, and large."""
    values = np.array([0.0, -0.0, 1.0, 2.0, -1.0, -2.0, 0.25, -0.25, 1e-7, -1e-7, 3.999999, -3.999999, 2.0**23 + 2],
                      dtype=np.float32)  # fmt: skip
    values = np.concatenate(
        [values, np.nextafter(values, np.float32(np.inf)), np.nextafter(values, np.float32(-np.inf))]
    )
    for point in values:
        for scale in (np.float32(1.0), np.float32(15.0), np.float32(2047.0)):
            position = np.float32(point * scale + np.float32(0.5))
            lower, fraction = hash_encoding_numba.lattice_cell(point, scale)
            assert lower == int(np.floor(position)), (point, scale)
            assert fraction == position - np.float32(np.floor(position)), (point, scale)


def test_the_twin_is_the_reference_encoding_of_clamped_points():
    points, table, _ = problem(seed=2)
    torch.testing.assert_close(hash_encode(points, table, LAYOUT), encode_torch(points.clamp(0, 1), table, LAYOUT))


@pytest.mark.parametrize("backend", ["torch", "kernel"])
def test_known_values_give_the_encoding_and_its_gradients(backend):
    """``known`` from a no-grad pass: the same values and gradients as encoding again (kernel: without a second
    forward, see tests/encodings/test_hash_encoding.py)."""
    points, table, upstream = problem(seed=3)
    table = torch.nn.Parameter(table)
    with torch.no_grad():
        known = hash_encode(points, table, LAYOUT, backend)
    results = []
    for values_known in (None, known):
        table.grad = None
        inputs = points.clone().requires_grad_(True)
        (hash_encode(inputs, table, LAYOUT, backend, known=values_known) * upstream).sum().backward()
        results.append((table.grad.clone(), inputs.grad))
    for reused, again in zip(*results[::-1]):
        torch.testing.assert_close(reused, again, rtol=0.0, atol=1e-5 * max(1.0, float(again.abs().max())))


def stand_in_tinycudann(extra_params: int) -> types.ModuleType:
    """A ``tinycudann`` whose ``Encoding`` reads its ``params`` as this package's table (the torch twin) and
    holds ``extra_params`` more parameters than the layout's table."""

    class Encoding(torch.nn.Module):
        built = 0

        def __init__(self, n_input_dims: int, encoding_config: dict) -> None:
            super().__init__()
            Encoding.built += 1
            self.params = torch.nn.Parameter(torch.zeros(LAYOUT.num_params + extra_params))

        def forward(self, points: torch.Tensor) -> torch.Tensor:
            return encode_torch(points, self.params, LAYOUT).half()

    return types.SimpleNamespace(Encoding=Encoding)


def test_a_tcnn_encoding_is_built_with_its_module_and_reads_its_table(monkeypatch):
    """tiny-cuda-nn's HashGrid is built as the module is (a failure stops the model's set-up, not a step), one per
    module, and each call hands it this module's table (simulated on the CPU)."""
    tcnn = stand_in_tinycudann(extra_params=0)
    monkeypatch.setitem(sys.modules, "tinycudann", tcnn)
    first, second = MultiresHashEncoding(LAYOUT, backend="tcnn"), MultiresHashEncoding(LAYOUT, backend="tcnn")
    assert tcnn.Encoding.built == 2 and list(first.state_dict()) == ["table"]
    points = torch.rand(64, 3, generator=torch.Generator().manual_seed(5))
    for module in (first, second):
        torch.testing.assert_close(module(points), encode_torch(points, module.table, LAYOUT).half().float())


def test_a_tcnn_hash_grid_of_another_size_is_refused_as_the_module_is_built(monkeypatch):
    monkeypatch.setitem(sys.modules, "tinycudann", stand_in_tinycudann(extra_params=8))
    with pytest.raises(BackendUnavailable, match="use --pipeline.model.hash-backend kernel"):
        MultiresHashEncoding(LAYOUT, backend="tcnn")

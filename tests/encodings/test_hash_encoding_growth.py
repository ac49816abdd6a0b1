"""A hash encoding grows in place: the same parameter, laid out in more rows, its gradient and Adam's moments with it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from nerfstudio_accel.encodings.hash_encoding import MultiresHashEncoding
from nerfstudio_accel.encodings.table_growth import grow_table
from nerfstudio_accel.kernels.hash_layout import HashGridLayout

SMALL = HashGridLayout(num_levels=4, features_per_level=2, log2_hashmap_size=6, base_resolution=4, per_level_scale=2.0)
"""Levels of 4, 8, 16 and 32 vertices a side; at 2^12 rows levels 1 and 2 become dense and level 3 stays hashed."""
LARGE = dataclasses.replace(SMALL, log2_hashmap_size=12)
INSIDE = torch.rand(2048, 3, generator=torch.Generator().manual_seed(1)) * 0.8
"""Points whose corners lie inside every level's grid (the module docstring of table_growth says why)."""


def trained_encoding(backend: str = "torch") -> tuple:
    """An encoding of ``SMALL`` that may grow to ``LARGE``, after one Adam step and with a fresh gradient."""
    torch.manual_seed(0)
    encoding = MultiresHashEncoding(SMALL, backend, max_log2_hashmap_size=LARGE.log2_hashmap_size)
    optimizer = torch.optim.Adam(encoding.parameters(), lr=1e-2, fused=False)
    encoding(INSIDE).square().sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    encoding(INSIDE).square().sum().backward()
    return encoding, optimizer


def test_growing_keeps_the_parameter_and_what_points_read():
    encoding, optimizer = trained_encoding()
    table = encoding.table
    before = encoding(INSIDE).detach()
    encoding.grow(LARGE.log2_hashmap_size, [optimizer])
    assert encoding.table is table and table.shape == (LARGE.num_params,)
    assert encoding.layout == LARGE
    assert torch.equal(encoding(INSIDE).detach(), before)


def test_the_gradient_and_adams_moments_are_laid_out_like_the_table():
    encoding, optimizer = trained_encoding()
    state = {key: value.clone() for key, value in optimizer.state[encoding.table].items()}
    grad = encoding.table.grad.clone()
    encoding.grow(LARGE.log2_hashmap_size, [optimizer])
    grown = optimizer.state[encoding.table]
    assert torch.equal(grown["exp_avg"], grow_table(state["exp_avg"], SMALL, LARGE))
    assert torch.equal(grown["exp_avg_sq"], grow_table(state["exp_avg_sq"], SMALL, LARGE))
    assert torch.equal(grown["step"], state["step"])  # the bias correction goes on where it was
    assert torch.equal(encoding.table.grad, grow_table(grad, SMALL, LARGE))
    before = encoding.table.detach().clone()
    optimizer.step()  # the state fits the grown parameter
    assert not torch.equal(encoding.table.detach(), before)


def test_the_kernel_backend_reads_a_grown_table_as_the_reference_does():
    encoding, optimizer = trained_encoding("kernel")
    encoding.grow(LARGE.log2_hashmap_size, [optimizer])
    points = torch.rand(4096, 3, generator=torch.Generator().manual_seed(2))
    reference = MultiresHashEncoding(LARGE, "torch")
    reference.table.data = encoding.table.detach().clone()
    torch.testing.assert_close(encoding(points), reference(points), rtol=1e-6, atol=1e-7)


def test_growing_to_the_same_rows_does_nothing_and_past_the_limit_or_back_is_refused():
    encoding, optimizer = trained_encoding()
    table = encoding.table.detach().clone()
    encoding.grow(SMALL.log2_hashmap_size, [optimizer])
    assert torch.equal(encoding.table.detach(), table)
    with pytest.raises(ValueError, match="grows to at most 2\\^12, not 2\\^13"):
        encoding.grow(13)
    encoding.grow(LARGE.log2_hashmap_size)
    with pytest.raises(ValueError, match="not 2\\^6"):
        encoding.grow(SMALL.log2_hashmap_size)


def test_tables_that_cannot_grow_are_refused_when_built():
    with pytest.raises(ValueError, match="cannot grow"):
        MultiresHashEncoding(dataclasses.replace(SMALL, log2_dense_limit=12), "torch", max_log2_hashmap_size=12)
    with pytest.raises(ValueError, match="cannot grow"):
        MultiresHashEncoding(LARGE, "torch", max_log2_hashmap_size=6)
    assert MultiresHashEncoding(SMALL, "torch").max_log2_hashmap_size == SMALL.log2_hashmap_size

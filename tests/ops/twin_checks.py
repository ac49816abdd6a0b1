"""What the ops' tests share: the backends and devices to run each op on, a skip where one cannot run, the
comparison with the torch twin, and a packed problem of uneven rays."""

from __future__ import annotations

import pytest
import torch

from nerfstudio_accel.ops.backends import nerfacc_ops_unavailable_reason

N_RAYS = 64
BACKENDS = [("torch", "cpu"), ("kernel", "cpu"), ("torch", "cuda"), ("kernel", "cuda"), ("nerfacc", "cuda")]
BACKEND_IDS = [f"{backend}-{device}" for backend, device in BACKENDS]
DEVICES = ["cpu", "cuda"]
"""For the ops with one implementation for every backend."""


def device_for(backend: str, device: str) -> torch.device:
    """``device``, or a skip saying why this backend cannot run here."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"the {backend} backend on CUDA tensors needs a CUDA GPU")
    reason = nerfacc_ops_unavailable_reason() if backend == "nerfacc" else ""
    if reason:
        pytest.skip(f"nerfacc CUDA ops unavailable: {reason}")
    return torch.device(device)


def assert_like_twin(actual: torch.Tensor, expected: torch.Tensor, backend: str, device: str) -> None:
    """Bit-equal on the CPU backends that run the twin; within float32 rounding on CUDA."""
    if device == "cpu":
        assert torch.equal(actual, expected)
    else:
        torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-5)


def packed_problem(seed: int = 0):
    """Packed, ray-sorted intervals of uneven rays (some empty), densities from clear to opaque, colours."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 40, (N_RAYS,), generator=generator)
    counts[:3] = 0
    ray_indices = torch.repeat_interleave(torch.arange(N_RAYS), counts)
    dt = 0.005 + 0.05 * torch.rand(ray_indices.numel(), generator=generator)
    t_ends = torch.cumsum(dt, 0)
    sigmas = torch.exp(2.0 * torch.randn(ray_indices.numel(), generator=generator))
    colors = torch.rand(ray_indices.numel(), 3, generator=generator)
    return ray_indices, t_ends - dt, t_ends, sigmas, colors

"""Every backend choice, probed, resolved and checked in one place: the config resolution the ops' names come from.

Three choices, each with the same four functions (``device_type`` is ``"cpu"``, ``"cuda"``, ``"mps"``, ...):

- the hash encoding, ``--pipeline.model.hash-backend`` (``auto|torch|kernel|tcnn``): ``auto`` is ``tcnn``
  where it runs, else ``kernel`` where it runs, else ``torch``; ``kernel`` also probes each variant a run
  needs (half outputs, point gradients) at its first call, and encodes with ``torch`` where one fails
  (:func:`~nerfstudio_accel.ops.hash_encoding.kernel_variant_runs`, beside the op it guards);
- the field implementation, ``--pipeline.model.implementation`` (``auto|tcnn|torch``): the MLPs and
  direction encoding on tiny-cuda-nn or PyTorch;
- the ray-marching backend, ``--pipeline.model.occupancy.backend`` (``auto|nerfacc|kernel|torch``): ``kernel``
  is the fused marcher, numba on CPU and Triton on CUDA; ``auto`` is ``nerfacc`` on CUDA when its ops load,
  else ``kernel`` where it runs, else ``torch`` (on CUDA with one warning).

``<choice>_unavailable_reason(choice, device_type)`` says why a choice cannot run (``''`` when it can);
``resolve_<choice>`` turns ``auto`` into a concrete choice; ``check_<choice>`` raises
:class:`~nerfstudio_accel.errors.BackendUnavailable` (one line with the fix) so that training refuses to
start rather than save a config that names one backend and train with another; ``runnable_<choice>``
falls back to ``auto``'s pick with a warning, for a trained model opened where its choice cannot run.
The field implementation has no fallback: tiny-cuda-nn and torch store their parameters differently.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from typing import Literal, Optional

import torch

from nerfstudio_accel.errors import BackendUnavailable
from nerfstudio_accel.ops.hash_encoding import kernel_unavailable_reason
from nerfstudio_accel.ops.marching import traverse_occupancy_grid

logger = logging.getLogger(__name__)

HashBackend = Literal["auto", "torch", "kernel", "tcnn"]
ResolvedHashBackend = Literal["torch", "kernel", "tcnn"]
SamplerBackend = Literal["auto", "nerfacc", "kernel", "torch"]
ResolvedSamplerBackend = Literal["nerfacc", "kernel", "torch"]

# ---------------------------------------------------------------------------------------------
# Probes: what runs on this machine
# ---------------------------------------------------------------------------------------------


def tcnn_unavailable_reason(device_type: str) -> str:
    """Empty when tiny-cuda-nn runs for ``device_type`` here, else one line saying why not.

    Uses nerfstudio's own import probe, so a tiny-cuda-nn that is installed but fails to import
    counts as unavailable (nerfstudio's modules then silently build their torch versions).
    """
    if device_type != "cuda":
        return f"tiny-cuda-nn needs a CUDA device (this run is on {device_type})"
    from nerfstudio.utils import external

    if not external.TCNN_EXISTS:
        return "tiny-cuda-nn does not import here"
    return ""


def tcnn_encoding_unavailable_reason(device_type: str) -> str:
    """Empty when tiny-cuda-nn's encoding runs on ``device_type`` here, else one line saying why not."""
    return tcnn_unavailable_reason(device_type)


@functools.lru_cache(maxsize=None)
def marcher_unavailable_reason(device_type: str) -> str:
    """Empty when the fused occupancy-grid marcher (numba on CPU, Triton on CUDA) runs on ``device_type`` here,
    else one line saying why not. On CUDA, a Triton that cannot follow the reference's rounding is refused before
    any launch (:func:`~nerfstudio_accel.kernels.marching_triton.missing_triton_features`), then the kernels are
    checked once per process against the CPU torch reference on 64 rays (one level with uniform steps, two with
    cone-angle steps: each a kernel variant of its own)."""
    if device_type not in ("cpu", "cuda"):
        return f"there is no fused marcher for {device_type} devices"
    module = "numba" if device_type == "cpu" else "triton"
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed (pip install {module})"
    if device_type == "cpu":
        return ""
    from nerfstudio_accel.kernels import marching_triton

    missing = marching_triton.missing_triton_features()
    if missing:
        return missing
    if not torch.cuda.is_available():
        return "CUDA is not available"

    generator = torch.Generator().manual_seed(0)
    origins = torch.randn(64, 3, generator=generator) * 2.0
    directions = torch.nn.functional.normalize(torch.randn(64, 3, generator=generator) * 0.3 - origins, dim=-1)
    for levels, cone_angle in ((1, 0.0), (2, 0.01)):  # each compiles its own kernel variant
        binaries = torch.rand(levels, 16, 16, 16, generator=generator) > 0.5
        aabbs = torch.stack([torch.tensor([-1.0, -1, -1, 1, 1, 1]) * 2**level for level in range(levels)])
        inputs = [origins, directions, binaries, aabbs, torch.full((64,), 0.05), torch.full((64,), 1e3)]
        try:
            fused = traverse_occupancy_grid(*[t.to(device_type) for t in inputs], 0.01, cone_angle, backend="kernel")
        except Exception as error:  # noqa: BLE001 - any build or launch failure means "does not run here"
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            return f"its triton kernels failed to run: {first_line}"
        # the reference on CPU: the kernels follow its float32 arithmetic (torch on CUDA divides by reciprocals)
        reference = traverse_occupancy_grid(*inputs, 0.01, cone_angle)
        if not torch.equal(fused[0].cpu(), reference[0]) or not all(
            torch.allclose(a.cpu(), b, rtol=1e-6, atol=1e-6) for a, b in zip(fused[1:], reference[1:])
        ):
            return "its triton kernels disagree with the torch reference on this device"
    return ""


_NERFACC_OPS_STATUS: Optional[str] = None  # None: not probed yet; "" ok; otherwise why not


def nerfacc_ops_unavailable_reason() -> str:
    """Empty string when nerfacc's compiled CUDA ops load here, else one line saying why not.

    Probed once per process (the first call may JIT-compile nerfacc's extension: minutes).
    """
    global _NERFACC_OPS_STATUS
    if _NERFACC_OPS_STATUS is None:
        if not torch.cuda.is_available():
            _NERFACC_OPS_STATUS = "no CUDA device"
        else:
            try:
                from nerfacc.cuda._backend import _C  # loading builds or loads the extension

                if _C is None:
                    raise RuntimeError("nerfacc's CUDA extension did not build")
                _NERFACC_OPS_STATUS = ""
            except Exception as error:  # a failed compile raises many kinds of errors
                _NERFACC_OPS_STATUS = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return _NERFACC_OPS_STATUS


# ---------------------------------------------------------------------------------------------
# Hash encoding: auto | torch | kernel | tcnn
# ---------------------------------------------------------------------------------------------


def hash_backend_unavailable_reason(backend: str, device_type: str) -> str:
    """Empty when the resolved ``backend`` runs on ``device_type`` here, else one line saying why not."""
    reasons = {"kernel": kernel_unavailable_reason, "tcnn": tcnn_encoding_unavailable_reason}
    return reasons[backend](device_type) if backend in reasons else ""


def resolve_hash_backend(requested: str, device_type: str, tcnn_layout: bool = True) -> ResolvedHashBackend:
    """``auto`` -> ``tcnn``, else ``kernel``, else ``torch``, by what runs on ``device_type``; explicit
    choices pass through (:func:`check_hash_backend` refuses one that cannot run). ``tcnn_layout`` False: the
    table's layout is not one tiny-cuda-nn builds (a block's, ``log2_dense_limit``), so ``auto`` skips ``tcnn``."""
    if requested not in ("auto", "torch", "kernel", "tcnn"):
        raise BackendUnavailable(f"unknown hash backend {requested!r}; choose auto, torch, kernel or tcnn")
    if requested != "auto":
        return requested  # type: ignore[return-value]
    if tcnn_layout and not tcnn_encoding_unavailable_reason(device_type):
        return "tcnn"
    return "torch" if kernel_unavailable_reason(device_type) else "kernel"


def check_hash_backend(backend: str, device_type: str) -> None:
    """Raise :class:`BackendUnavailable` (one line) when a chosen ``backend`` cannot run on ``device_type`` here."""
    reason = hash_backend_unavailable_reason(backend, device_type)
    if reason:
        raise BackendUnavailable(
            f"--pipeline.model.hash-backend {backend} cannot run on {device_type} here: {reason}; "
            f"choose another (auto picks one that runs)"
        )


def runnable_hash_backend(backend: str, device_type: str, tcnn_layout: bool = True) -> ResolvedHashBackend:
    """``backend`` when it runs on ``device_type``, else what ``auto`` picks there, with a warning: every
    backend reads the same table, so a model saved with one opens with another (ns-eval, the viewer)."""
    reason = hash_backend_unavailable_reason(backend, device_type)
    if not reason:
        return backend  # type: ignore[return-value]
    fallback = resolve_hash_backend("auto", device_type, tcnn_layout)
    logger.warning(
        "hash backend %s cannot run on %s here (%s); encoding with %s instead", backend, device_type, reason, fallback
    )
    return fallback


# ---------------------------------------------------------------------------------------------
# Field implementation: auto | tcnn | torch
# ---------------------------------------------------------------------------------------------


def implementation_unavailable_reason(implementation: str, device_type: str) -> str:
    """Empty when ``implementation`` runs on ``device_type`` here (``torch`` and ``auto`` always do),
    else one line saying why not."""
    return tcnn_unavailable_reason(device_type) if implementation == "tcnn" else ""


def resolve_implementation(requested: str, device_type: str) -> Literal["tcnn", "torch"]:
    """``auto`` -> ``tcnn`` where tiny-cuda-nn runs on ``device_type``, else ``torch``; explicit choices
    pass through (:func:`check_implementation` refuses a ``tcnn`` that cannot run)."""
    if requested not in ("auto", "tcnn", "torch"):
        raise BackendUnavailable(f"unknown field implementation {requested!r}; choose auto, tcnn or torch")
    if requested == "auto":
        return "torch" if tcnn_unavailable_reason(device_type) else "tcnn"
    return requested  # type: ignore[return-value]


def check_implementation(implementation: str, device_type: str, method: str) -> None:
    """Raise :class:`BackendUnavailable` (one line) when a ``method`` model (``accel-ngp``, ...) configured
    for tiny-cuda-nn cannot build here.

    tiny-cuda-nn and torch store their parameters in different layouts, so a checkpoint made with
    one does not load into the other: building the torch twin silently would fail later, less clearly.
    """
    reason = implementation_unavailable_reason(implementation, device_type)
    if reason:
        raise BackendUnavailable(
            f"this {method} model uses tiny-cuda-nn (implementation: tcnn in its config.yml), but {reason}; "
            f"open it on a CUDA machine with tiny-cuda-nn, or train with --pipeline.model.implementation torch"
        )


# ---------------------------------------------------------------------------------------------
# Ray marching: auto | nerfacc | kernel | torch
# ---------------------------------------------------------------------------------------------


def check_backend_name(name: str) -> None:
    """Raise :class:`BackendUnavailable` naming the valid choices for an unknown sampler backend."""
    if name not in ("auto", "nerfacc", "kernel", "torch"):
        raise BackendUnavailable(f"unknown sampler backend {name!r}; choose one of auto, nerfacc, kernel, torch")


def sampler_backend_unavailable_reason(backend: str, device_type: str) -> str:
    """Why ``backend`` cannot march rays on ``device_type`` here; empty when it can (``auto`` always can)."""
    check_backend_name(backend)
    if backend == "kernel":
        return marcher_unavailable_reason(device_type)
    if backend == "nerfacc":
        return nerfacc_ops_unavailable_reason() if device_type == "cuda" else f"tensors are on {device_type}"
    return ""


def check_sampler_backend(backend: str, device_type: str) -> None:
    """Raise :class:`BackendUnavailable` (one line with the fix) when ``backend`` cannot run on ``device_type`` here."""
    reason = sampler_backend_unavailable_reason(backend, device_type)
    if reason:
        raise BackendUnavailable(
            f"sampler backend '{backend}' cannot run here ({reason}); use --pipeline.model.occupancy.backend torch"
        )


def resolve_sampler_backend(requested: str, device_type: str) -> ResolvedSamplerBackend:
    """The marching backend for ``device_type``; ``auto``: nerfacc on CUDA when its ops load, else the fused
    ``kernel`` marcher where it runs, else torch. Raises like :func:`check_sampler_backend`."""
    check_sampler_backend(requested, device_type)
    if requested != "auto":
        return requested  # type: ignore[return-value]
    candidates: tuple = ("nerfacc", "kernel") if device_type == "cuda" else ("kernel",)
    reasons = []
    for candidate in candidates:
        reason = sampler_backend_unavailable_reason(candidate, device_type)
        if not reason:
            return candidate
        reasons.append(f"{candidate}: {reason}")
    if device_type == "cuda":
        logger.warning(
            "no compiled or fused marcher runs here (%s); using the pure-PyTorch sampler", "; ".join(reasons)
        )
    return "torch"


def runnable_sampler_backend(requested: str, device_type: str) -> ResolvedSamplerBackend:
    """``requested`` when it runs on ``device_type``, else what ``auto`` picks there, with a warning: every
    backend marches the same grid, so a model trained with one opens with another (ns-eval, ns-viewer elsewhere)."""
    reason = sampler_backend_unavailable_reason(requested, device_type)
    if not reason:
        return resolve_sampler_backend(requested, device_type)
    fallback = resolve_sampler_backend("auto", device_type)
    logger.warning(
        "sampler backend %s cannot run on %s here (%s); marching with %s instead",
        requested,
        device_type,
        reason,
        fallback,
    )
    return fallback


def runs_numba_kernels(hash_backend: ResolvedHashBackend, sampler_backend: Optional[ResolvedSamplerBackend]) -> bool:
    """Whether a CPU run with these resolved backends trains through numba kernels (``kernel`` is numba on the CPU);
    ``sampler_backend`` None: no occupancy marcher."""
    return hash_backend == "kernel" or sampler_backend == "kernel"

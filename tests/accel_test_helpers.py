"""Helpers shared by test modules (``tests/`` is on ``sys.path`` under pytest): an accel-ngp AccelTrainer
on CPU as ns-train builds it, nerfstudio's training step with its callbacks, and state snapshots."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
from nerfstudio.scripts.train import train_loop

from nerfstudio_accel.engine.build import build_trainer_config
from nerfstudio_accel.engine.trainer import AccelTrainer, AccelTrainerConfig, training_step
from nerfstudio_accel.fields.hash_grid_field import HashGridField
from nerfstudio_accel.methods import accel_ngp
from nerfstudio_accel.sampling.occupancy import GridUpdateOptions, MarchingOptions, OccupancySampler


def quiet_train_flags(max_iterations: int, output_dir: Path, steps_per_save: int = 100_000) -> List[str]:
    """ns-train flags for a test run: tensorboard instead of the viewer, no evaluation during training, a save every
    ``steps_per_save`` steps, ``max_iterations`` steps, into ``output_dir``."""
    never = "100000"
    return [
        *("--vis", "tensorboard", "--max-num-iterations", str(max_iterations)),
        *("--steps-per-eval-image", never, "--steps-per-eval-batch", never, "--steps-per-eval-all-images", never),
        *("--steps-per-save", str(steps_per_save), "--output-dir", str(output_dir)),
    ]


def error_lines(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.lower().startswith("error")]


def assert_one_line_error(code: int, out: str, err: str, *expected: str) -> str:
    """Non-zero exit, no stack trace, exactly one ``error...`` line, containing every expected substring."""
    both = out + err
    assert code != 0, both[-3000:]
    assert "Traceback" not in both, both[-3000:]
    lines = error_lines(err) + error_lines(out)
    assert len(lines) == 1, f"expected one error line, got {lines}\n{err[-3000:]}"
    for part in expected:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    return lines[0]


TRITON_INTERPRETER_ENV = {
    "TRITON_INTERPRET": "1",
    # NumPy 2.5 (the GPU machine's) raises where older NumPy warns; Triton 3.6's interpreter once hit it on a
    # reduction used as a loop bound, so the warning fails these checks here too
    "PYTHONWARNINGS": "ignore,error:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning",
}
"""The environment of a subprocess that runs Triton kernels' source on CPU tensors."""


def make_trainer(
    scene: Path,
    output_dir: Path,
    setup: bool = True,
    device: str = "cpu",
    pipeline: Optional[Dict[str, Any]] = None,
    model: Optional[Dict[str, Any]] = None,
    dataparser: Optional[Any] = None,
    method: Optional[AccelTrainerConfig] = None,
    resolve: bool = True,
    test_mode: str = "val",
    **trainer_overrides,
) -> AccelTrainer:
    """accel-ngp's AccelTrainer on ``device``, as ns-train builds it, on a Blender-format scene (or the
    given ``dataparser`` config's format); ``pipeline`` and ``model`` override those configs' fields (a nested
    one by its dotted path, ``occupancy.resolution``), keyword arguments the trainer config's. ``method``: another method's config than accel-ngp's. ``resolve``
    False: the caller saves config.yml before set-up, which resolves it (as ns-train does). ``test_mode``: the
    split evaluation reads (checked and loaded)."""

    def override(config) -> None:
        config.experiment_name, config.timestamp = "exp", "run"
        for target, overrides in (
            (config, trainer_overrides),
            (config.pipeline, pipeline or {}),
            (config.pipeline.model, model or {}),
        ):
            for path, value in overrides.items():
                *parents, key = path.split(".")
                owner = target
                for parent in parents:
                    owner = getattr(owner, parent)
                assert hasattr(owner, key), f"{type(owner).__name__} has no field {key}"
                setattr(owner, key, value)

    config = build_trainer_config(
        method if method is not None else accel_ngp.config,
        scene,
        device,
        dataparser=dataparser if dataparser is not None else BlenderDataParserConfig(),
        output_dir=output_dir,
        eval_split=test_mode,
        configure=override,
        resolve=resolve,
    )
    assert isinstance(config, AccelTrainerConfig)
    if not resolve:
        config.save_config()
    trainer = config.setup(local_rank=0, world_size=1)
    if setup:
        trainer.setup(test_mode=test_mode)
    return trainer


def train_run(scene: Path, output_dir: Path, steps: int, **kwargs) -> AccelTrainer:
    """A ``steps``-step run as ns-train leaves it: config.yml saved before set-up, the last step's checkpoint;
    keyword arguments as :func:`make_trainer`'s."""
    trainer = make_trainer(
        scene, output_dir, setup=False, resolve=False, max_num_iterations=steps, steps_per_save=1000, **kwargs
    )
    trainer.setup()
    trainer.train()
    return trainer


def gloo_train_loop(rank: int, init_file: str, config: AccelTrainerConfig) -> None:
    """Rank ``rank`` of 2 gloo processes running nerfstudio's per-rank ``train_loop``, as its launcher runs
    ``--machine.num-devices 2`` (for ``torch.multiprocessing.spawn``)."""
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=2, timeout=timedelta(seconds=120)
    )
    try:
        train_loop(rank, 2, config, global_rank=rank)
    finally:
        dist.destroy_process_group()


def run_steps(trainer: AccelTrainer, start: int, count: int) -> list:
    """``count`` training steps with nerfstudio's callbacks; returns the losses."""
    losses = []
    for step in range(start, start + count):
        loss, _, metrics = training_step(trainer, step)
        losses.append(float(loss))
        trainer.last_metrics = metrics
    return losses


def snapshot(trainer: AccelTrainer):
    """Parameters and optimizer state, cloned."""
    params = [p.detach().clone() for p in trainer.pipeline.model.parameters()]
    optimizer_state = copy.deepcopy({name: opt.state_dict() for name, opt in trainer.optimizers.optimizers.items()})
    return params, optimizer_state


def assert_same_state(a, b) -> None:
    for x, y in zip(a[0], b[0]):
        assert torch.equal(x, y)
    for name in a[1]:
        for key, state in a[1][name]["state"].items():
            for field, value in state.items():
                other = b[1][name]["state"][key][field]
                assert torch.equal(value, other) if torch.is_tensor(value) else value == other


def full_grid_sampler(
    aabb: torch.Tensor, warmed_up: bool = True, occupancy: float = 1.0, **marching
) -> OccupancySampler:
    """A torch-backend occupancy sampler in training mode whose 16^3 grid is occupied everywhere (every cell at
    ``occupancy``), culling by opacity once ``warmed_up``; ``marching``: :class:`MarchingOptions` fields."""
    sampler = OccupancySampler(aabb, resolution=16, backend="torch", marching=MarchingOptions(**marching))
    sampler.grid.binaries.fill_(True)
    sampler.grid.occs.fill_(occupancy)
    sampler.warmed_up.fill_(warmed_up)
    sampler.train()
    return sampler


def sample(sampler, origins, directions, options, density_fn=None, near_planes=None, far_planes=None, stratified=False):
    """``sampler``'s packed samples with marching ``options``, as ``(ray_indices, t_starts, t_ends)``."""
    sampler.marching = options
    samples = sampler.sample(origins, directions, near_planes, far_planes, density_fn, stratified)
    return samples.ray_indices, samples.t_starts, samples.t_ends


def update(sampler, step, density_fn, render_step_size, **schedule):
    """``sampler``'s grid update at ``step`` with this step size and schedule (GridUpdateOptions' fields)."""
    sampler.marching = MarchingOptions(render_step_size=render_step_size)
    sampler.grid_update = GridUpdateOptions(**schedule)
    sampler.update(step, density_fn)


def marching_scene(levels: int, seed: int, n_rays: int = 1500):
    """Rays (some starting inside the grid, some missing it), a random multi-level grid and jittered near
    planes: ``origins, directions, binaries, aabbs, near, far`` for the marchers' parity tests."""
    generator = torch.Generator().manual_seed(seed)
    origins = torch.randn(n_rays, 3, generator=generator) * 2.0
    origins[:100] *= 0.2  # some rays start inside the grid
    targets = torch.randn(n_rays, 3, generator=generator) * 0.4
    targets[-50:] = origins[-50:] * 3.0  # some rays point away and miss
    directions = torch.nn.functional.normalize(targets - origins, dim=-1)
    base = torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0])
    aabbs = torch.stack([base * 2**level for level in range(levels)])
    binaries = torch.rand(levels, 24, 24, 24, generator=generator) > 0.5
    near = 0.05 + 0.01 * torch.rand(n_rays, generator=generator)  # jittered like stratified marching
    far = torch.full((n_rays,), 1e3)
    return origins, directions, binaries, aabbs, near, far


def run_step_benchmark(script: str, scene, tmp_path, *options: str):
    """``benchmarks/<script>`` for 2 steps after 2 on ``scene``, occupancy sampler (and ``options``): its JSON
    results and markdown."""
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--data", str(scene), "--downscale", "1", "--samplers",
         "occupancy", "--warmup", "2", "--steps", "2", "--json", str(out), "--markdown", str(tmp_path / "report.md"),
         *options],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())["results"], (tmp_path / "report.md").read_text()


CULLING_AABB = torch.tensor([[-1.5, -1.5, -1.5], [1.5, 1.5, 1.5]])
"""The box of :func:`hilly_field`."""
CULLING_EPS = 1e-4
"""The early-stop transmittance the culling tests use."""


def hilly_field(
    contract: bool = False, region: Optional[torch.Tensor] = None, hash_backend: str = "kernel", features: int = 2
):
    """A small kernel-backend field whose densities range from empty to opaque across space (a table drawn with
    spread 1, the raw density scaled to mean -1 and spread 4 over the box), so rays stop early, cull faint
    candidates and keep others; ``features`` per hash level."""
    torch.manual_seed(5)
    field = HashGridField(
        CULLING_AABB, contract=contract, grid_region=region, num_levels=8, max_res=256, log2_hashmap_size=12,
        hash_backend=hash_backend, features_per_level=features,
    )  # fmt: skip
    points = (torch.rand(20000, 3) - 0.5) * 3.0
    output = field.density_mlp.layers[1]
    with torch.no_grad():
        field.position_encoding.table.normal_(0.0, 1.0)
        raw = field.density_head(points)[:, 0]
        output.weight[0] *= 4.0 / raw.std()
        output.bias[0] -= field.density_head(points)[:, 0].mean() + 1.0
    return field.eval()


def field_pair(first_backend: str, second_backend: str):
    """Two small fields over ``[-1, 1]^3`` with the same weights, whose hash encodings run on the given backends."""
    aabb = torch.tensor([[-1.0] * 3, [1.0] * 3])
    torch.manual_seed(0)
    first = HashGridField(aabb, log2_hashmap_size=12, hash_backend=first_backend)
    second = HashGridField(aabb, log2_hashmap_size=12, hash_backend=second_backend)
    second.load_state_dict(first.state_dict())
    return first, second

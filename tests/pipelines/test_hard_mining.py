"""Hard sample mining (paper 004): tau estimator (eq. 3-5), hard-sample draws, and the mined step."""

from __future__ import annotations

import collections
import itertools
import math
import random
from typing import Dict, List, Tuple

import numpy as np
import pytest
import torch
from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.bench.evaluation import evaluate_views
from nerfstudio_accel.bench.memory import saved_tensor_bytes
from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.engine.build import build_trainer_config
from nerfstudio_accel.engine.trainer import training_step
from nerfstudio_accel.methods import accel_ngp
from nerfstudio_accel.ops import precision
from nerfstudio_accel.pipelines.hard_mining import (
    HardBatchSizer,
    HardSampleMiningPipelineConfig,
    draw_hard_samples,
    importance_moments,
    tau_from_moments,
)
from nerfstudio_accel.scenes.object_scene import SceneSpec, generate_scene


def tau_from_importance(importance: torch.Tensor) -> float:
    return tau_from_moments(importance_moments(importance))


def tau_by_the_paper(importance: torch.Tensor) -> float:
    """Eq. 3-4 written literally: R = ||g - 1/B||^2 / ||g||^2, tau = (1 - R)^(-1/2), g = G / sum(G)."""
    g = importance.double() / importance.double().sum()
    uniform = 1.0 / importance.numel()
    ratio = torch.sum((g - uniform) ** 2) / torch.sum(g**2)
    return float((1.0 - ratio) ** -0.5)


def test_tau_is_one_for_uniform_importance():
    assert tau_from_importance(torch.full((1000,), 0.3)) == pytest.approx(1.0, abs=1e-6)


def test_tau_grows_with_peakedness_and_matches_eq_3_4():
    """One-hot G gives tau = sqrt(B); in between, tau matches the equations (float64 here, float32 in the
    estimator, which must run on MPS) and orders by peakedness."""
    B = 400
    one_hot = torch.zeros(B)
    one_hot[7] = 2.5
    assert tau_from_importance(one_hot) == pytest.approx(math.sqrt(B), rel=1e-6)
    generator = torch.Generator().manual_seed(0)
    mild = torch.rand(B, generator=generator) + 0.5
    sharp = torch.rand(B, generator=generator) ** 8
    for importance in (mild, sharp):
        assert tau_from_importance(importance) == pytest.approx(tau_by_the_paper(importance), rel=1e-5)
    assert 1.0 < tau_from_importance(mild) < tau_from_importance(sharp) < math.sqrt(B)


def test_tau_of_all_zero_importance_is_one_and_of_a_nan_is_none():
    assert tau_from_importance(torch.zeros(50)) == 1.0
    assert tau_from_importance(torch.tensor([1.0, float("nan")])) is None
    assert tau_from_importance(torch.tensor([1.0, float("inf")])) is None


def test_tau_from_summed_moments_is_tau_over_the_union_of_batches():
    """The moments add up: tau from two ranks' summed moments is tau of both batches together."""
    generator = torch.Generator().manual_seed(1)
    first, second = torch.rand(300, generator=generator) ** 4, torch.rand(500, generator=generator)
    summed = importance_moments(first) + importance_moments(second)
    assert tau_from_moments(summed) == pytest.approx(tau_by_the_paper(torch.cat([first, second])), rel=1e-5)


def test_tau_hat_moving_average_and_batch_size():
    """tau_hat starts at 1 and moves by alpha toward each step's tau; b = round(B / tau_hat) in [1, B]."""
    sizer = HardBatchSizer(alpha=0.1)
    assert sizer.hard_batch_size(1000) == 1000
    one_hot = torch.zeros(100)
    one_hot[3] = 1.0
    tau = sizer.update(one_hot)
    assert tau == pytest.approx(10.0)
    assert sizer.tau_hat == pytest.approx(0.9 * 1.0 + 0.1 * 10.0)
    assert sizer.hard_batch_size(1000) == round(1000 / 1.9)
    assert sizer.update(torch.tensor([float("nan"), 1.0])) is None and sizer.tau_hat == pytest.approx(1.9)
    sizer.tau_hat = 5000.0
    assert sizer.hard_batch_size(1000) == 1
    assert sizer.hard_batch_size(0) == 0
    assert HardBatchSizer(alpha=0.1, min_fraction=0.5, tau_hat=10.0).hard_batch_size(1000) == 500


def test_draws_are_unique_sorted_and_follow_importance():
    """Single draws land on index i with probability G_i / sum(G); multi-draws are distinct."""
    importance = torch.tensor([0.0, 1.0, 3.0, 6.0])
    torch.manual_seed(0)
    counts = torch.zeros(4)
    for _ in range(4000):
        counts[draw_hard_samples(importance, 1)] += 1
    assert counts[0] == 0
    assert torch.allclose(counts / counts.sum(), importance / importance.sum(), atol=0.03)
    many = draw_hard_samples(torch.rand(500) + 0.01, 200)
    assert many.numel() == 200 and torch.unique(many).numel() == 200
    assert torch.equal(many, torch.sort(many).values)


def test_draws_with_few_or_no_nonzero_importances():
    """Zero-importance samples carry no gradient: never drawn; all-zero importance draws nothing."""
    assert draw_hard_samples(torch.zeros(10), 5).numel() == 0
    assert draw_hard_samples(torch.tensor([0.0, 2.0, 0.0, 1.0]), 3).tolist() == [1, 3]


def test_draws_from_more_than_two_to_the_24_samples():
    """torch.multinomial without replacement refuses more than 2^24 categories, which large GPU batches
    exceed; the draw takes any number: b sorted distinct indices, none of zero importance, heavier ones
    more often, and indices past 2^24 reachable."""
    torch.manual_seed(0)
    importance = torch.rand(2**24 + 1000)
    importance[::3] = 0.0
    hard = draw_hard_samples(importance, 2**20)
    assert hard.numel() == 2**20 and hard.dtype == torch.long
    assert bool((hard[1:] > hard[:-1]).all())  # sorted and distinct
    assert bool((importance[hard] > 0).all())
    assert float(importance[hard].mean()) > float(importance[importance > 0].mean()) + 0.1  # ~0.67 against 0.5
    assert int(hard[-1]) >= 2**24


def successive_sampling_probabilities(weights: List[float], b: int) -> Dict[Tuple[int, ...], float]:
    """Exact probability of each set of ``b`` indices when they are drawn one at a time, each with
    probability proportional to its weight among those not yet drawn (enumerating every order)."""
    total = sum(weights)
    probabilities = {}
    for order in itertools.permutations([i for i, w in enumerate(weights) if w > 0], b):
        p, left = 1.0, total
        for i in order:
            p, left = p * weights[i] / left, left - weights[i]
        key = tuple(sorted(order))
        probabilities[key] = probabilities.get(key, 0.0) + p
    return probabilities


def test_draws_without_replacement_follow_successive_sampling():
    """Over 20000 seeded draws of b = 2 from weights [0, 1, 2, 3, 4], each pair's and each index's
    frequency matches successive sampling without replacement within 5 binomial standard deviations
    (sqrt(p (1 - p) / 20000) <= 0.0036). Drawing proportionally to weight instead (index 4 in 80% of
    draws, against 71.6% exactly) would miss by over 20 of them."""
    weights, b, draws = [0.0, 1.0, 2.0, 3.0, 4.0], 2, 20000
    exact_pairs = successive_sampling_probabilities(weights, b)
    exact_inclusion = [sum(p for pair, p in exact_pairs.items() if i in pair) for i in range(len(weights))]
    torch.manual_seed(0)
    pairs = collections.Counter(tuple(draw_hard_samples(torch.tensor(weights), b).tolist()) for _ in range(draws))
    inclusion = [sum(n for pair, n in pairs.items() if i in pair) / draws for i in range(len(weights))]
    assert set(pairs) <= set(exact_pairs) and inclusion[0] == 0.0
    for observed, p in [(pairs[pair] / draws, p) for pair, p in exact_pairs.items()] + list(
        zip(inclusion, exact_inclusion)
    ):
        assert abs(observed - p) <= 5 * math.sqrt(p * (1 - p) / draws)


@pytest.fixture(scope="module")
def mining_scene(tmp_path_factory):
    return generate_scene(
        tmp_path_factory.mktemp("scene"), SceneSpec(num_train=6, num_val=1, num_test=1, resolution=24, seed=1)
    )


def mining_trainer(scene, output_dir, min_hard_fraction, sampler="occupancy"):
    """accel-ngp behind the hard-mining pipeline, white background (deterministic targets), CPU."""
    assert isinstance(accel_ngp.config.pipeline, HardSampleMiningPipelineConfig)

    def override(config) -> None:
        config.pipeline.hard_mining = True
        config.pipeline.min_hard_fraction = min_hard_fraction
        config.pipeline.model.background = "white"
        config.pipeline.model.sampler = sampler
        config.set_timestamp()

    config = build_trainer_config(
        "accel-ngp", scene, "cpu", BlenderDataParserConfig(), output_dir=output_dir, configure=override
    )
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    model = trainer.pipeline.model
    if sampler == "occupancy":
        model.sampler.update(0, model.field.density)  # a warm-up grid update
    else:
        model.sampler.update(300)  # part-way through annealing
    return trainer


@pytest.mark.parametrize("sampler", ["occupancy", "proposal"])
def test_all_samples_mined_gives_ordinary_gradients(mining_scene, tmp_path, sampler):
    """With b = B, the surrogate backward equals ordinary training's parameter gradients (the main field's
    and, with the proposal sampler, the proposal fields' from the interlevel loss), and the reported loss
    is the true loss."""
    torch.manual_seed(0)
    pipeline = mining_trainer(mining_scene, tmp_path, min_hard_fraction=1.0, sampler=sampler).pipeline
    model = pipeline.model
    ray_bundle, batch = pipeline.datamanager.next_train(0)
    params = [p for group in model.get_param_groups().values() for p in group]
    assert (sampler == "proposal") == any(name.startswith("sampler.fields") for name, _ in model.named_parameters())

    model.zero_grad()
    torch.manual_seed(1)  # the same stratified jitter for both forwards
    ordinary_losses = model.get_loss_dict(model(ray_bundle), batch)
    assert ("interlevel_loss" in ordinary_losses) == (sampler == "proposal")
    ordinary_loss = sum(ordinary_losses.values())
    ordinary_loss.backward()
    ordinary = [p.grad.clone() for p in params]

    model.zero_grad()
    torch.manual_seed(1)
    _, loss_dict, metrics = pipeline.mined_loss(ray_bundle, batch)
    mined_loss = sum(loss_dict.values())
    mined_loss.backward()
    assert float(metrics["hard_mining_b"]) <= float(metrics["hard_mining_B"]) and float(metrics["hard_mining_b"]) > 0
    assert float(mined_loss) == pytest.approx(float(ordinary_loss), rel=1e-6)
    for expected, param in zip(ordinary, params):
        assert torch.allclose(param.grad, expected, rtol=1e-4, atol=1e-9)
    assert float(model.field.position_encoding.table.grad.abs().sum()) > 0
    if sampler == "proposal":  # the interlevel loss reaches the proposal fields through the mined step too
        assert any(float(p.grad.abs().sum()) > 0 for p in model.sampler.parameters())


def test_graph_is_built_for_hard_samples_only(mining_scene, tmp_path):
    """The graph pass's saved bytes scale with b, not B: with tau_hat = 4 the whole mined step saves
    under half of ordinary training's bytes, and tau_hat = 8 halves the graph pass again."""
    torch.manual_seed(0)
    pipeline = mining_trainer(mining_scene, tmp_path, min_hard_fraction=0.0).pipeline
    model = pipeline.model
    ray_bundle, batch = pipeline.datamanager.next_train(0)
    ordinary = saved_tensor_bytes(lambda: model.get_loss_dict(model(ray_bundle), batch))

    graph_pass_bytes = []
    field_raw = model.field_raw

    def counted_field_raw(samples):  # in a mined step, only the graph pass calls field_raw
        result = []
        graph_pass_bytes.append(saved_tensor_bytes(lambda: result.extend(field_raw(samples))))
        return tuple(result)

    model.field_raw = counted_field_raw
    step = {}
    for tau_hat in (4.0, 8.0):
        pipeline.batch_sizer.alpha, pipeline.batch_sizer.tau_hat = 0.0, tau_hat
        step[tau_hat] = {
            "bytes": saved_tensor_bytes(lambda: step.update(metrics=pipeline.mined_loss(ray_bundle, batch)[2]))
        }
        step[tau_hat]["b"] = float(step["metrics"]["hard_mining_b"])
        step[tau_hat]["graph_pass"] = graph_pass_bytes[-1]
        step[tau_hat]["fraction"] = float(step["metrics"]["hard_mining_fraction"])
    assert 0.15 < step[4.0]["fraction"] < 0.3
    assert step[4.0]["bytes"] < 0.5 * ordinary
    b_ratio = step[8.0]["b"] / step[4.0]["b"]
    assert step[8.0]["graph_pass"] / step[4.0]["graph_pass"] == pytest.approx(b_ratio, rel=0.1)


def test_step_without_samples_skips_the_graph_pass(mining_scene, tmp_path):
    """An empty occupancy grid marches no samples: b = 0, no graph pass, and a finite loss with nothing
    to backpropagate (AccelTrainer then skips the backward: see tests/engine)."""
    pipeline = mining_trainer(mining_scene, tmp_path, min_hard_fraction=0.0).pipeline
    pipeline.model.sampler.grid.binaries.zero_()
    ray_bundle, batch = pipeline.datamanager.next_train(0)
    _, loss_dict, metrics = pipeline.mined_loss(ray_bundle, batch)
    assert float(metrics["hard_mining_B"]) == 0 and float(metrics["hard_mining_b"]) == 0
    assert math.isfinite(float(sum(loss_dict.values())))
    assert not sum(loss_dict.values()).requires_grad


def test_mined_training_runs_through_nerfstudios_trainer(mining_scene, tmp_path):
    """nerfstudio's Trainer drives the mined step unchanged: finite losses, parameters move, and the
    per-step metrics report B, b <= B and tau_hat >= 1."""
    from nerfstudio_accel.bench.budget import train_for_budget

    torch.manual_seed(0)
    trainer = mining_trainer(mining_scene, tmp_path, min_hard_fraction=0.0)
    before = [p.detach().clone() for p in trainer.pipeline.model.field.parameters()]
    run = train_for_budget(trainer, budget_seconds=math.inf, max_steps=12)
    assert run.steps == 12
    after = list(trainer.pipeline.model.field.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before))
    _, _, metrics = trainer.pipeline.get_train_loss_dict(12)
    assert 0 < float(metrics["hard_mining_b"]) <= float(metrics["hard_mining_B"])
    assert float(metrics["hard_mining_tau_hat"]) >= 1.0
    assert math.isfinite(float(metrics["psnr"]))


def poison_colour_output(model, value: float) -> None:
    """The field's raw colour of the first sample becomes ``value`` (once)."""

    def poison(_module, _inputs, output):
        handle.remove()
        output = output.clone()
        output[0, 0] = value
        return output

    handle = model.field.color_mlp.register_forward_hook(poison)


def poison_colour_gradient(model, value: float) -> None:
    """The loss gradient on the first sample's raw colour, the score mining draws by, becomes ``value`` (once)."""
    render = model.render

    def poisoned_render(samples, raw_density, raw_color):
        model.render = render
        raw_color.register_hook(lambda grad: grad.index_fill(0, torch.tensor([0]), value))
        return render(samples, raw_density, raw_color)

    model.render = poisoned_render


@pytest.mark.parametrize("poison", [poison_colour_output, poison_colour_gradient], ids=["nan-output", "inf-score"])
def test_non_finite_scores_skip_the_step_instead_of_crashing(mining_scene, tmp_path, poison):
    """A NaN output or an infinite score: with b < B the draw would hand them to torch.multinomial, which
    raises. Instead the step reaches AccelTrainer's guard and is skipped: parameters and tau_hat unchanged,
    the skip counted, and the next step trains."""
    torch.manual_seed(0)
    trainer = mining_trainer(mining_scene, tmp_path, min_hard_fraction=0.0)
    pipeline, model = trainer.pipeline, trainer.pipeline.model
    pipeline.batch_sizer.alpha, pipeline.batch_sizer.tau_hat = 0.5, 4.0  # b = B / 4 < B
    before = [p.detach().clone() for p in model.parameters()]
    poison(model, float("nan") if poison is poison_colour_output else float("inf"))
    trainer.train_iteration(0)
    assert trainer.skipped_steps == 1
    assert pipeline.batch_sizer.tau_hat == 4.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    loss, _, metrics = trainer.train_iteration(1)
    assert math.isfinite(float(loss)) and trainer.consecutive_skips == 0 and float(metrics["hard_mining_b"]) > 0


class NoFloat64(torch.overrides.TorchFunctionMode):
    """Fails any torch call that makes a float64 tensor, as MPS does (it has no float64)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        assert not any(isinstance(out, torch.Tensor) and out.dtype == torch.float64 for out in outputs), (
            f"float64 from {func}"
        )
        return result


def test_mined_step_makes_no_float64_tensor_where_the_device_has_none(mining_scene, tmp_path, monkeypatch):
    """The mined step (sampling, scoring, tau estimate, draw, graph pass) runs on devices without float64 (MPS):
    told that this device has none, it makes no float64 tensor."""
    monkeypatch.setattr(precision, "supports_float64", lambda device: False)
    torch.manual_seed(0)
    pipeline = mining_trainer(mining_scene, tmp_path, min_hard_fraction=0.0).pipeline
    ray_bundle, batch = pipeline.datamanager.next_train(0)
    with NoFloat64():
        _, loss_dict, metrics = pipeline.mined_loss(ray_bundle, batch)
    assert float(metrics["hard_mining_b"]) > 0 and math.isfinite(float(sum(loss_dict.values())))


def test_renderer_is_backpropagated_once_when_no_other_module_needs_its_graph(mining_scene, tmp_path):
    """accel-ngp: the renderer's graph from the scoring outputs reaches no parameter, so the gradient for
    the draw is its only backward; the trainer's backward goes through the hard samples' graph alone."""
    torch.manual_seed(0)
    trainer = mining_trainer(mining_scene, tmp_path, min_hard_fraction=0.0)
    model = trainer.pipeline.model
    rendered_from = []
    render = model.render

    def recording_render(samples, raw_density, raw_color):
        rendered_from.append((raw_density, raw_color))
        return render(samples, raw_density, raw_color)

    model.render = recording_render
    trainer.train_iteration(0)
    ((raw_density, raw_color),) = rendered_from
    assert raw_density.requires_grad and raw_color.requires_grad
    assert raw_density.grad is None and raw_color.grad is None, "the trainer's backward went through the renderer again"
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.field.parameters())


def test_pass_timers_wait_for_the_device_only_on_logged_steps(mining_scene, tmp_path):
    """On CUDA each pass-time reading synchronizes the device. They are read on the trainer's logging steps
    (--logging.steps-per-log) and printing steps only; other steps neither wait nor report pass times."""
    torch.manual_seed(0)
    trainer = mining_trainer(mining_scene, tmp_path, min_hard_fraction=0.0)
    pipeline = trainer.pipeline
    assert trainer.config.logging.steps_per_log == 10
    waits = []
    pipeline._synchronize_device = lambda: waits.append(True)  # stands in for torch.cuda.synchronize
    timed_steps = []
    for step in range(21):
        waits.clear()
        _, _, metrics = training_step(trainer, step)
        if "hard_mining_scoring_ms" in metrics:
            timed_steps.append(step)
            assert len(waits) == 4 and float(metrics["hard_mining_graph_forward_ms"]) >= 0
        else:
            assert not waits
        assert "hard_mining_tau_hat" in metrics
    assert timed_steps == [0, 10, 20]


LEARNING_STEPS = 100
MINED_PSNR_SLACK_DB = 1.3  # mined - ordinary over seeds 0-9: mean -0.05, sd 0.42, min -0.59 dB; mean - 3 sd = -1.30 dB
LEARNT_PSNR_DB = 19.5  # seeds 0-9: mined 20.83-22.05 dB, ordinary 20.89-22.23 dB (sd 0.51); mined mean b/B 0.69-0.72


@pytest.fixture(scope="module")
def learning_scene(tmp_path_factory):
    return generate_scene(
        tmp_path_factory.mktemp("scene"), SceneSpec(num_train=40, num_val=2, num_test=4, resolution=48, seed=3)
    )


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's generators, as ns-train seeds them (torch's alone leaves a run unreproducible)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_steps(trainer, steps: int) -> Tuple[float, float]:
    """``steps`` training steps from step 0; returns the held-out PSNR and the mean b/B (1 without mining)."""
    fractions = []
    for step in range(steps):
        run_steps(trainer, step, 1)
        fractions.append(float(trainer.last_metrics.get("hard_mining_fraction", 1.0)))
    return evaluate_views(trainer.pipeline)["psnr"], sum(fractions) / steps


@pytest.mark.slow
def test_hard_mining_learns_as_much_per_step_as_ordinary_training(learning_scene, tmp_path):
    """From one seed, accel-ngp with and without hard mining train the same 100 steps (a coarse marching
    step keeps them cheap): mining backpropagates through under 80% of the samples and still reaches
    ordinary training's held-out PSNR, up to the seed-to-seed spread. What mining gains at equal training
    time is a benchmark, not a test (docs/hard_mining.md)."""
    results = {}
    for hard_mining in (True, False):
        seed_everything(0)
        trainer = make_trainer(
            learning_scene,
            tmp_path / str(hard_mining),
            pipeline={"hard_mining": hard_mining},
            model={"occupancy.render_step_size": 0.02},
        )
        results[hard_mining] = train_steps(trainer, LEARNING_STEPS)
    (mined_psnr, mined_fraction), (ordinary_psnr, _) = results[True], results[False]
    print(
        f"after {LEARNING_STEPS} steps: hard mining {mined_psnr:.2f} dB (mean b/B {mined_fraction:.2f}), ordinary {ordinary_psnr:.2f} dB"
    )
    assert min(mined_psnr, ordinary_psnr) > LEARNT_PSNR_DB
    assert mined_fraction < 0.8
    assert mined_psnr >= ordinary_psnr - MINED_PSNR_SLACK_DB


@pytest.mark.parametrize("sampler, mines", [("occupancy", True), ("proposal", False)])
def test_auto_mining_is_the_measured_default_for_the_sampler_and_config_yml_holds_it(
    tiny_scene, tmp_path, sampler, mines
):
    """--pipeline.hard-mining auto resolves from the model and its sampler (on a CPU: on with the occupancy grid,
    off with the proposal fields; off on CUDA: docs/hard_mining.md) into a plain True/False in config.yml; an
    explicit choice is kept."""
    assert accel_ngp.config.pipeline.hard_mining == "auto"

    def with_sampler(config) -> None:
        config.pipeline.model.sampler = sampler
        config.set_timestamp()

    config = build_trainer_config(
        "accel-ngp", tiny_scene, "cpu", BlenderDataParserConfig(), output_dir=tmp_path, configure=with_sampler
    )
    assert config.pipeline.hard_mining is mines
    assert not config.pipeline.model.hard_mining_pays("cuda", SceneFacts(bounded=True, images_have_alpha=True))
    config.save_config()
    assert f"hard_mining: {str(mines).lower()}" in (config.get_base_dir() / "config.yml").read_text()
    explicit = build_trainer_config(
        "accel-ngp",
        tiny_scene,
        "cpu",
        BlenderDataParserConfig(),
        flags=["--pipeline.hard-mining", str(not mines)],
        output_dir=tmp_path,
        configure=with_sampler,
    )
    assert explicit.pipeline.hard_mining is (not mines)


def test_an_unresolved_auto_mining_choice_is_refused_in_one_line(tiny_scene, tmp_path):
    config = build_trainer_config("accel-ngp", tiny_scene, "cpu", BlenderDataParserConfig(), output_dir=tmp_path)
    config.pipeline.hard_mining = "auto"  # as a config edited by hand after resolution would hold it
    trainer = config.setup(local_rank=0, world_size=1)
    with pytest.raises(SystemExit) as exit_info:
        trainer.setup()
    assert "--pipeline.hard-mining auto was never resolved" in str(exit_info.value)

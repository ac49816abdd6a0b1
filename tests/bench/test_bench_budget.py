"""The bench's training loop and measures are fair to every method: an untimed warm-up step, graphs measured
in the precision the method trains in, and non-finite steps the trainer skips do not end the run; evaluations
score all test views or evenly spaced ones."""

from __future__ import annotations

import time

import torch

from accel_test_helpers import make_trainer, run_steps
from nerfstudio_accel.bench.budget import train_for_budget
from nerfstudio_accel.bench.evaluation import evaluate_views, evenly_spaced_views
from nerfstudio_accel.bench.memory import training_graph_bytes

NO_EVALUATION = lambda final: {"psnr": 0.0}  # noqa: E731  (the loop is under test, not the scores)


def test_first_step_is_an_untimed_warm_up(tiny_scene, tmp_path):
    """A method whose first step loads its CUDA extensions (simulated: a 1.5 s pause) does not pay for it
    inside its budget: the warm-up is reported apart and the timed steps follow it."""
    trainer = make_trainer(tiny_scene, tmp_path)
    train_iteration = trainer.train_iteration
    calls = []

    def slow_first_step(step):
        if not calls:
            time.sleep(1.5)
        calls.append(step)
        return train_iteration(step)

    trainer.train_iteration = slow_first_step
    start = time.perf_counter()
    run = train_for_budget(trainer, budget_seconds=1000.0, max_steps=3, evaluate=NO_EVALUATION)
    elapsed = time.perf_counter() - start
    assert run.warmup_seconds >= 1.5 and elapsed - run.train_seconds >= 1.5, "the pause is outside the budget"
    assert run.steps == 3 and calls == [0, 1, 2, 3] and run.curve[-1]["step"] == 4


def test_graph_bytes_are_measured_in_the_training_precision(tiny_scene, tmp_path):
    """A bf16 run's graph is measured under its bf16 autocast: the saved activations are bf16 and the graph
    is smaller than the same step's in fp32."""
    bytes_by_precision = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        trainer = make_trainer(
            tiny_scene, tmp_path / precision, precision=precision, pipeline={"min_hard_fraction": 1.0}
        )
        run_steps(trainer, 0, 1)  # with the first grid update
        torch.manual_seed(1)
        bytes_by_precision[precision] = training_graph_bytes(trainer, step=1)
    assert 0 < bytes_by_precision["bf16"] < 0.8 * bytes_by_precision["fp32"]


def test_a_step_the_trainer_skips_does_not_fail_the_run(tiny_scene, tmp_path):
    """A NaN colour in one step makes its loss NaN: AccelTrainer skips that step, and the bench counts it
    and trains on instead of failing the method's row."""
    torch.manual_seed(0)
    trainer = make_trainer(tiny_scene, tmp_path)
    poisoned = []

    def poison_once(_module, _inputs, output):
        if poisoned:
            return output
        poisoned.append(True)
        return torch.full_like(output, float("nan"))

    trainer.pipeline.model.field.color_mlp.register_forward_hook(poison_once)
    run = train_for_budget(trainer, budget_seconds=300.0, max_steps=4, evaluate=NO_EVALUATION)
    assert run.steps == 4 and run.skipped_steps == 1 == trainer.skipped_steps


def test_evenly_spaced_views_take_first_and_last_and_never_repeat():
    assert evenly_spaced_views(5, 20) == [
        0,
        5,
        10,
        14,
        19,
    ]  # round(linspace(0, 19, 5)) = round(0, 4.75, 9.5, 14.25, 19)
    assert evenly_spaced_views(3, 25) == [0, 12, 24]
    assert evenly_spaced_views(1, 20) == [0]
    assert evenly_spaced_views(None, 4) == evenly_spaced_views(4, 4) == evenly_spaced_views(9, 4) == [0, 1, 2, 3]
    for total in range(1, 40):
        for count in range(1, total + 1):
            views = evenly_spaced_views(count, total)
            assert len(set(views)) == count and views == sorted(views) and views[-1] == (total - 1 if count > 1 else 0)


def test_evaluation_scores_the_chosen_views_and_reports_samples_per_ray(tiny_scene, tmp_path):
    trainer = make_trainer(tiny_scene, tmp_path)
    run_steps(trainer, 0, 2)
    some = evaluate_views(trainer.pipeline, views=[1])
    every = evaluate_views(trainer.pipeline)
    assert (some["views"], some["views_total"]) == (1, 2) and (every["views"], every["views_total"]) == (2, 2)
    assert some["num_samples_per_ray"] > 0 and some["num_samples_per_ray_std"] == 0.0  # one view: no spread
    assert every["psnr_std"] >= 0 and "num_samples_per_ray" in every

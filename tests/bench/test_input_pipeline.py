"""benchmarks/input_pipeline.py's alternating mode: which depth trains which steps, each block without the last one's
producer, and the report's arithmetic (a stand-in for training: never timings)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import input_pipeline  # noqa: E402


def test_alternate_reverses_the_depths_every_other_round_and_trains_consecutive_steps(monkeypatch):
    config = SimpleNamespace(prefetch_batches=None)
    closed = []
    datamanager = SimpleNamespace(config=config, close=lambda: closed.append(config.prefetch_batches))
    trainer = SimpleNamespace(pipeline=SimpleNamespace(datamanager=datamanager))
    calls = []

    def stand_in(trainer_, start, count):
        calls.append((config.prefetch_batches, start, count))
        assert len(closed) == len(calls), "every block starts without the last block's producer"
        return 0.01 * count * (2 if config.prefetch_batches == 0 else 1), 0, [], []  # depth 0: 20 ms/step

    monkeypatch.setattr(input_pipeline, "train", stand_in)
    ms_per_step = input_pipeline.alternate(trainer, [0, 2], start=30, rounds=3, block_steps=5)
    assert [depth for depth, _, _ in calls] == [0, 2, 2, 0, 0, 2]
    assert [start for _, start, _ in calls] == [30, 35, 40, 45, 50, 55]
    assert ms_per_step == {0: [20.0, 20.0, 20.0], 2: [10.0, 10.0, 10.0]}


def test_alternate_report_gives_medians_and_per_round_ratios_to_the_first_depth():
    lines = input_pipeline.alternate_report({0: [20.0, 40.0, 30.0], 2: [10.0, 30.0, 30.0]})
    assert lines[2] == "| 0 | 30.0 (20.0–40.0) | 1.000 (1.000–1.000) |"
    assert lines[3] == "| 2 | 30.0 (10.0–30.0) | 0.750 (0.625–0.875) |"  # ratios 0.5, 0.75, 1.0

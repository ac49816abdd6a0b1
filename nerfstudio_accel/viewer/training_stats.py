"""TrainingStats: what the viewer's Accel panel shows, accumulated from each training step's metrics.

:meth:`TrainingStats.record` takes a step's wall time and the metrics dict the pipeline already returns
(``num_rays_per_batch``, ``num_samples_per_batch``, ``psnr``, the ``hard_mining_*`` entries,
``loss_scale``, ``skipped_steps``, ``num_samples_per_ray``) plus the model's sampling figures;
:meth:`snapshot` turns the last ``window`` steps into rates and fractions, and :attr:`history` keeps a
bounded PSNR/loss-against-time series for the panel's chart. Nothing here touches the device: values
arrive as Python numbers (one ``.item()`` per metric on the steps the trainer records).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Mapping, Optional, Tuple, Union

from nerfstudio_accel.spatial.cell_samplers import SAMPLES_PER_RAY_OF_BLOCK

Number = Union[int, float]

MINING_KEYS = {
    "hard_mining_B": "mining_B",
    "hard_mining_b": "mining_b",
    "hard_mining_fraction": "mining_b_over_B",
    "hard_mining_tau_hat": "mining_tau_hat",
    "hard_mining_scoring_ms": "mining_scoring_ms",
    "hard_mining_graph_forward_ms": "mining_graph_forward_ms",
}
"""Pipeline metric name -> snapshot name, for the hard-mining entries (absent without mining)."""


@dataclass
class StepRecord:
    """One recorded training step."""

    seconds: float
    rays: float
    samples: float


@dataclass
class TrainingStats:
    """Accumulates per-step figures for the Accel panel.

    Args:
        max_steps: the run's last step, for the ETA.
        precision: ``fp32``, ``fp16`` or ``bf16`` (shown as is).
        window: steps the rates are averaged over.
        history_points: the chart keeps at most this many points (older ones are thinned 2:1).
    """

    max_steps: int
    precision: str = "fp32"
    window: int = 20
    history_points: int = 400
    steps: Deque[StepRecord] = field(default_factory=deque)
    history: List[Tuple[float, float, float]] = field(default_factory=list)
    """``(training seconds, psnr, loss)`` per recorded step, thinned to ``history_points``."""
    latest: Dict[str, Number] = field(default_factory=dict)
    best_psnr: float = float("-inf")
    step: int = -1
    training_seconds: float = 0.0

    def record(
        self,
        step: int,
        seconds: float,
        loss: float,
        metrics: Mapping[str, Number],
        sampling: Optional[Mapping[str, Number]] = None,
        training_seconds: Optional[float] = None,
    ) -> None:
        """Add a step that took ``seconds`` (its own compute, viewer renders excluded) with its metrics
        (Python numbers) and the model's sampling figures, if it has them (``candidates``, ``kept``,
        ``alpha_culled`` sample counts and the grid's ``occupied_fraction``). ``training_seconds``: the
        compute time of all steps so far, for a caller that records only some steps (default: the sum of
        the recorded steps' ``seconds``)."""
        self.step = step
        self.training_seconds = self.training_seconds + seconds if training_seconds is None else training_seconds
        rays = float(metrics.get("num_rays_per_batch", 0.0))
        samples = float(metrics.get("num_samples_per_batch", 0.0))
        self.steps.append(StepRecord(seconds, rays, samples))
        while len(self.steps) > self.window:
            self.steps.popleft()
        self.latest = {name: float(value) for name, value in metrics.items()}
        self.latest["loss"] = float(loss)
        if sampling is not None:
            self.latest.update({name: float(value) for name, value in sampling.items()})
        psnr = float(metrics.get("psnr", float("nan")))
        if psnr == psnr:  # not nan
            self.best_psnr = max(self.best_psnr, psnr)
        self.history.append((self.training_seconds, psnr, float(loss)))
        if len(self.history) > self.history_points:
            self.history = self.history[::2]

    def snapshot(self) -> Dict[str, Union[Number, str]]:
        """The panel's values: rates over the window, the latest step's figures, culling fractions (of the
        marched candidates) and densities evaluated per kept sample, the input stall, hard mining, precision,
        loss scale, skipped steps, PSNR, ETA and, for a split scene, each block's samples per ray."""
        seconds = sum(record.seconds for record in self.steps)
        rays = sum(record.rays for record in self.steps)
        samples = sum(record.samples for record in self.steps)
        latest = self.latest
        values: Dict[str, Union[Number, str]] = {
            "step": self.step,
            "rays_per_second": rays / seconds if seconds > 0 else 0.0,
            "samples_per_second": samples / seconds if seconds > 0 else 0.0,
            "samples_per_ray": latest.get("num_samples_per_ray", samples / rays if rays > 0 else 0.0),
            "psnr": latest.get("psnr", float("nan")),
            "best_psnr": self.best_psnr if self.best_psnr > float("-inf") else float("nan"),
            "loss": latest.get("loss", float("nan")),
            "precision": self.precision,
            "loss_scale": latest.get("loss_scale", float("nan")),
            "skipped_steps": int(latest.get("skipped_steps", 0)),
            "eta_seconds": max(self.max_steps - 1 - self.step, 0) * (seconds / len(self.steps))
            if self.steps
            else float("nan"),
        }
        for metric, name in MINING_KEYS.items():
            if metric in latest:
                values[name] = latest[metric]
        candidates = latest.get("candidates", 0.0)
        if candidates > 0:
            alpha_culled = latest.get("alpha_culled", 0.0)
            kept = latest.get("kept", candidates)
            values["alpha_culled_fraction"] = alpha_culled / candidates
            values["early_stopped_fraction"] = max(candidates - kept - alpha_culled, 0.0) / candidates
            if "evaluated" in latest and kept > 0:
                values["evaluated_per_kept"] = latest["evaluated"] / kept
        for name, value in latest.items():
            if name in ("occupied_fraction", "input_stall_fraction") or name.startswith(SAMPLES_PER_RAY_OF_BLOCK):
                values[name] = value
        return values

"""Hard sample mining (Korhonen et al., "Efficient NeRF Optimization - Not All Samples Remain Equally Hard").

Per step: one forward over all ``B`` samples without a graph; the pixel loss is backpropagated through
the fp32 renderer to the pre-activation outputs only, giving each sample's importance
``G_i = ||dL / d(sigma'_i, c'_i)||`` (eq. 2); ``b = B / tau_hat`` samples are drawn with probability
proportional to ``G`` (eq. 3-5); the field runs again on those with a graph, and the cached output
gradients flow through it as the surrogate ``sum(raw_hard * grad_hard)``. The trainer's single
``backward()`` (GradScaler, accumulation) does the rest. Under torch.distributed the trainer averages
the gradients (:mod:`nerfstudio_accel.distributed`) and tau is estimated over every rank's samples.

It drives any :class:`~nerfstudio_accel.models.base.AccelModel` through its seams: ``sample_and_forward``
scores, ``render`` gives the output gradients, ``field_raw`` of ``samples.subset(hard)`` builds the graph.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Dict, List, Literal, Optional, Tuple, Type, Union

import torch
from jaxtyping import Float, Int
from nerfstudio.engine.callbacks import TrainingCallback, TrainingCallbackAttributes, TrainingCallbackLocation
from nerfstudio.utils.rich_utils import CONSOLE
from torch import Tensor

from nerfstudio_accel import distributed
from nerfstudio_accel.data.scene_checks import SceneFacts
from nerfstudio_accel.errors import ConfigError
from nerfstudio_accel.pipelines.accel_pipeline import AccelPipeline, AccelPipelineConfig, HardSampleBatch
from nerfstudio_accel.step_phases import phase


def reaches_parameters(tensor: Tensor, inputs: List[Tensor]) -> bool:
    """Whether ``tensor``'s autograd graph reaches any leaf other than ``inputs`` (a parameter that a
    backward of ``tensor`` would give a gradient). Walks the graph once, stopping at the first such leaf."""
    targets = {id(t) for t in inputs}
    stack, seen = [tensor.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # AccumulateGrad nodes hold their leaf
        if variable is not None and id(variable) not in targets:
            return True
        stack.extend(next_node for next_node, _ in node.next_functions)
    return False


def importance_moments(importance: Float[Tensor, " B"]) -> Float[Tensor, "3"]:
    """``(B, sum G, sum G^2)`` in float32 (MPS has no float64), the statistics tau is computed from; they
    add up over ranks."""
    importance = importance.float()
    return torch.stack(
        [importance.new_tensor(float(importance.numel())), importance.sum(), (importance * importance).sum()]
    )


def tau_from_moments(moments: Float[Tensor, "3"]) -> Optional[float]:
    """How many times larger a uniform batch must be to match importance sampling's gradient variance.

    With ``g = G / sum(G)``: ``R = ||g - 1/B||^2 / ||g||^2`` (eq. 3) and ``tau = (1 - R)^-1/2`` (eq. 4),
    which simplifies to ``tau = sqrt(B * ||g||^2) = sqrt(B * sum G^2) / sum G``: 1 for uniform ``G``,
    ``sqrt(B)`` for one-hot ``G``. All-zero ``G`` (nothing to learn from) gives 1; non-finite moments
    (a NaN or inf importance) give None.
    """
    count, total, squares = moments.tolist()  # one device read
    if not all(math.isfinite(value) for value in (count, total, squares)):
        return None
    if total <= 0:
        return 1.0
    return math.sqrt(count * squares) / total


@dataclass
class HardBatchSizer:
    """Running estimate ``tau_hat <- (1 - alpha) tau_hat + alpha tau`` (``tau_hat_0 = 1``) and the hard
    batch size ``b = round(B / tau_hat)`` within ``[1, B]`` (eq. 5), optionally floored at
    ``min_fraction * B``. The paper sets ``alpha = 1 / num_train_images``. Under torch.distributed, tau
    comes from the moments summed over ranks, so every rank holds the same tau_hat and the same b/B."""

    alpha: float
    min_fraction: float = 0.0
    tau_hat: float = 1.0

    def update(self, importance: Float[Tensor, " B"]) -> Optional[float]:
        """Fold this step's ``tau`` (over every rank's samples) into ``tau_hat``; returns ``tau``, or None
        with ``tau_hat`` unchanged when an importance on any rank is not finite."""
        tau = tau_from_moments(distributed.all_reduce_sum(importance_moments(importance)))
        if tau is not None:
            self.tau_hat = (1.0 - self.alpha) * self.tau_hat + self.alpha * tau
        return tau

    def hard_batch_size(self, num_samples: int) -> int:
        if num_samples == 0:
            return 0
        b = round(num_samples / self.tau_hat)
        b = max(b, round(self.min_fraction * num_samples))
        return int(min(max(b, 1), num_samples))


def draw_hard_samples(importance: Float[Tensor, " B"], b: int) -> Int[Tensor, " b_drawn"]:
    """``b`` distinct indices drawn with probability proportional to ``importance`` (finite, ``>= 0``), sorted.

    Samples with zero importance carry zero gradient, so at most ``count_nonzero(importance)``
    are drawn (none when all are zero). The draw is an exponential race, as inside
    ``torch.multinomial(replacement=False)`` but without its 2^24-sample limit: the ``b`` largest
    ``G_i / E_i`` with ``E_i ~ Exp(1)`` are distributed as ``b`` successive draws proportional to ``G``
    among the samples not yet drawn.
    """
    available = int(torch.count_nonzero(importance))
    b = min(b, available)
    if b == 0:
        return torch.zeros(0, dtype=torch.long, device=importance.device)
    if b == available:
        return torch.nonzero(importance, as_tuple=False).reshape(-1)
    weights = importance.float()
    uniforms = torch.rand_like(weights).clamp_min_(torch.finfo(weights.dtype).tiny)  # (0, 1): no infinite key
    exponentials = uniforms.log_().neg_()  # Exp(1), in a quarter of exponential_'s time on the CPU
    keys = (weights / exponentials).masked_fill_(importance == 0, -1.0)  # (B,)
    return torch.sort(torch.topk(keys, b, sorted=False).indices).values


@dataclass
class HardSampleMiningPipelineConfig(AccelPipelineConfig):
    """Accel pipeline whose training step backpropagates through hard samples only."""

    _target: Type = field(default_factory=lambda: HardSampleMiningPipeline)
    hard_mining: Union[Literal["auto"], bool] = "auto"
    """Mine hard samples (False: ordinary training). auto: where mining measured ahead at equal time for the
    model, sampler and device (docs/hard_mining.md has the table); written into config.yml as True or False."""
    min_hard_fraction: float = 0.0
    """Floor on b/B. The paper has none (0); 1.0 trains on every sample with non-zero gradient."""
    print_every: int = 500
    """Print B, b, b/B, tau_hat and pass times to the terminal every this many steps (0: never).
    They are logged to tensorboard / wandb as Train Metrics Dict/hard_mining_* at the trainer's logging
    steps; pass times are measured on those steps only (on CUDA a timer waits for the device)."""

    def resolve(self, device_type: str, eval_split: str = "val") -> SceneFacts:
        """The accel pipeline's resolution, then ``hard_mining=auto`` from the resolved model's
        :meth:`~nerfstudio_accel.models.base.AccelModelConfig.hard_mining_pays`."""
        scene = super().resolve(device_type, eval_split)
        if self.hard_mining == "auto":
            self.hard_mining = self.model.hard_mining_pays(device_type, scene)
            CONSOLE.print(
                f"Hard sample mining {'on' if self.hard_mining else 'off'}: auto for this model, sampler and scene on "
                f"{device_type} (docs/hard_mining.md; --pipeline.hard-mining True or False to choose)"
            )
        return scene


class HardSampleMiningPipeline(AccelPipeline):
    """See the module docstring."""

    config: HardSampleMiningPipelineConfig

    def __init__(self, config: HardSampleMiningPipelineConfig, device: str, *args, **kwargs):
        super().__init__(config, device, *args, **kwargs)
        if config.hard_mining == "auto":
            raise ConfigError("--pipeline.hard-mining auto was never resolved; build the config with ns-train")
        num_images = max(len(self.datamanager.train_dataset), 1) if self.datamanager.train_dataset is not None else 1
        self.batch_sizer = HardBatchSizer(alpha=1.0 / num_images, min_fraction=config.min_hard_fraction)
        self.last_mining_stats: Dict[str, float] = {}
        self._keeping_hard_samples = False
        self._last_hard_samples: Optional[HardSampleBatch] = None

    def mines_hard_samples(self) -> bool:
        return self.config.hard_mining

    def keep_hard_samples(self, keep: bool) -> None:
        self._keeping_hard_samples = keep
        if not keep:
            self._last_hard_samples = None  # a stale batch is neither kept nor drawn when the toggle returns

    def hard_samples(self) -> Optional[HardSampleBatch]:
        return self._last_hard_samples

    def get_extra_state(self) -> Tensor:
        """tau_hat goes into checkpoints with the pipeline's state."""
        return torch.tensor(self.batch_sizer.tau_hat, dtype=torch.float64)

    def set_extra_state(self, state: Tensor) -> None:
        self.batch_sizer.tau_hat = float(state)

    def get_training_callbacks(
        self, training_callback_attributes: TrainingCallbackAttributes
    ) -> List[TrainingCallback]:
        callbacks = super().get_training_callbacks(training_callback_attributes)
        if (
            self.config.hard_mining and self.config.print_every > 0 and distributed.rank() == 0
        ):  # one report, not one per rank
            callbacks.append(
                TrainingCallback(
                    [TrainingCallbackLocation.AFTER_TRAIN_ITERATION],
                    self._print_mining,
                    update_every_num_iters=self.config.print_every,
                )
            )
        return callbacks

    def _print_mining(self, step: int) -> None:
        stats = self.last_mining_stats
        if stats:
            CONSOLE.print(
                f"hard mining, step {step}: B {stats['hard_mining_B']:.0f}, b {stats['hard_mining_b']:.0f} "
                f"(b/B {stats['hard_mining_fraction']:.2f}), tau_hat {stats['hard_mining_tau_hat']:.2f}, "
                f"scoring {stats['hard_mining_scoring_ms']:.0f} ms, graph forward {stats['hard_mining_graph_forward_ms']:.0f} ms"
            )

    def get_train_loss_dict(self, step: int, timed: bool = False):
        """A mined step (:meth:`mined_loss`); pass times are measured when ``timed`` and on print steps."""
        printing = self.config.print_every > 0 and step % self.config.print_every == 0
        return super().get_train_loss_dict(step, timed or printing)

    def batch_loss(self, ray_bundle, batch, timed: bool = False):
        """:meth:`mined_loss` of the batch when mining (pass times when ``timed``), else the ordinary loss."""
        if not self.config.hard_mining:
            return super().batch_loss(ray_bundle, batch, timed)
        return self.mined_loss(ray_bundle, batch, time_passes=timed)

    def mined_loss(
        self, ray_bundle, batch, time_passes: bool = True
    ) -> Tuple[Dict[str, Tensor], Dict[str, Tensor], Dict[str, Tensor]]:
        """One mined step on a given batch: ``(outputs, loss_dict, metrics)``. The loss's value is the true
        loss over all ``B`` samples; its gradient reaches the mined field through the hard samples'
        surrogate only (other modules, e.g. proposal networks, get their usual gradient). ``time_passes``
        adds the scoring and graph-forward times to the metrics (on CUDA each reading waits for the device).

        A non-finite output gradient (a NaN or inf anywhere in the batch) would make ordinary training's
        parameter gradients non-finite: the step then draws nothing, leaves tau_hat alone and returns a
        non-finite loss, which AccelTrainer's guard skips."""
        model = self.model
        start = self._clock(time_passes)
        samples, raw_density, raw_color = model.sample_and_forward(ray_bundle)
        raw = [raw_density.detach().float().requires_grad_(True), raw_color.detach().float().requires_grad_(True)]
        with torch.enable_grad(), phase("render and output gradients"):
            outputs = model.render(samples, *raw)
            metrics = model.get_metrics_dict(outputs, batch)
            loss_dict = model.get_loss_dict(outputs, batch, metrics)
            total = sum(loss_dict.values())
            # Other modules (e.g. proposal networks) may learn from the loss graph: keep it for the trainer's
            # backward only then; otherwise this is the renderer's only backward.
            keep_graph = reaches_parameters(total, raw)
            grads = torch.autograd.grad(total, raw, retain_graph=keep_graph, allow_unused=True)
        if not keep_graph:
            loss_dict = {name: value.detach() for name, value in loss_dict.items()}
        # per-sample output gradients, flat: (B, 1) for density and (B, 3) for colour
        with phase("importance and selection"):
            grads = [(torch.zeros_like(r) if g is None else g).reshape(-1, r.shape[-1]) for r, g in zip(raw, grads)]
            importance = sum(grad.square().sum(dim=-1) for grad in grads).sqrt_()  # ||(dL/dsigma', dL/dc')||
            finite = self.batch_sizer.update(importance) is not None  # a collective: every rank agrees
            if finite:
                hard = draw_hard_samples(importance, self.batch_sizer.hard_batch_size(importance.numel()))
            else:
                hard = torch.zeros(0, dtype=torch.long, device=importance.device)
        scoring_seconds = self._clock(time_passes) - start

        start = self._clock(time_passes)
        surrogate = torch.zeros((), device=importance.device)
        if hard.numel() > 0:
            with phase("graph forward"):
                hard_outputs = model.field_raw(samples.subset(hard))
                for hard_raw, grad in zip(hard_outputs, grads):
                    surrogate = surrogate + (hard_raw.reshape(-1, grad.shape[-1]).float() * grad[hard]).sum()
        graph_seconds = self._clock(time_passes) - start

        first = next(iter(loss_dict))
        loss_dict[first] = loss_dict[first] + (surrogate - surrogate.detach())  # value: true loss; gradient: surrogate
        if not finite:
            loss_dict[first] = loss_dict[first] + float("nan")
        stats = {
            "hard_mining_B": importance.numel(),
            "hard_mining_b": hard.numel(),
            "hard_mining_fraction": hard.numel() / max(importance.numel(), 1),
            "hard_mining_tau_hat": self.batch_sizer.tau_hat,
        }
        if time_passes:
            stats.update(
                hard_mining_scoring_ms=1000 * scoring_seconds, hard_mining_graph_forward_ms=1000 * graph_seconds
            )
        self.last_mining_stats = {**self.last_mining_stats, **stats}
        if self._keeping_hard_samples:  # positions only: the samples may hold the proposal fields' graph
            self._last_hard_samples = (samples.ray_indices, samples.positions.detach(), samples.n_rays, hard)
        metrics.update({name: torch.tensor(float(value)) for name, value in stats.items()})
        return outputs, loss_dict, metrics

    def _clock(self, timed: bool) -> float:
        """Seconds, after the device's queued work is done (pass times on CUDA would be launch times);
        0 without waiting when the pass is not ``timed``."""
        if not timed:
            return 0.0
        self._synchronize_device()
        return time.perf_counter()

    def _synchronize_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

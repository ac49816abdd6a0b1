"""FusedAdamOptimizerConfig: torch's fused Adam where it exists, the same steps and state as plain Adam."""

from __future__ import annotations

import copy

import torch

from nerfstudio_accel.engine.optimizers import FusedAdamOptimizerConfig, fused_adam_supported
from nerfstudio_accel.methods import accel_ngp
from nerfstudio_accel.spatial.block_field import APPEARANCE_GROUP


def three_steps(optimizer: torch.optim.Optimizer, params, grads) -> None:
    for grad in grads:
        for param, g in zip(params, grad):
            param.grad = g.clone()
        optimizer.step()


def test_accel_ngp_fields_use_fused_adam_on_cpu():
    config = accel_ngp.config.optimizers["fields"]["optimizer"]
    assert isinstance(config, FusedAdamOptimizerConfig)
    optimizer = config.setup([torch.nn.Parameter(torch.zeros(4))])
    assert optimizer.defaults["fused"] is True


def test_betas_reach_adam_and_accel_ngp_decays_the_second_moment_faster(tiny_scene, tmp_path):
    from nerfstudio_accel.engine.build import build_trainer_config

    generator = torch.Generator().manual_seed(0)
    start, grads = torch.randn(50, generator=generator), [[torch.randn(50, generator=generator)] for _ in range(3)]
    stepped = {}
    for betas in [(0.9, 0.999), (0.9, 0.99)]:
        ours = [torch.nn.Parameter(start.clone())]
        torchs = [torch.nn.Parameter(start.clone())]
        three_steps(FusedAdamOptimizerConfig(lr=1e-2, betas=betas, eps=1e-15).setup(ours), ours, grads)
        three_steps(torch.optim.Adam(torchs, lr=1e-2, betas=betas, eps=1e-15), torchs, grads)
        torch.testing.assert_close(ours[0], torchs[0], rtol=1e-5, atol=1e-6)
        stepped[betas] = ours[0].detach()
    assert not torch.allclose(stepped[(0.9, 0.999)], stepped[(0.9, 0.99)], rtol=0.0, atol=1e-6)
    for group in ("fields", APPEARANCE_GROUP):
        assert accel_ngp.config.optimizers[group]["optimizer"].betas == (0.9, 0.99)
    flags = ["--optimizers.fields.optimizer.betas", "0.9", "0.999"]  # ns-train's flag back to torch's default
    config = build_trainer_config(accel_ngp.config, tiny_scene, "cpu", flags=flags, output_dir=tmp_path, resolve=False)
    optimizer = config.optimizers["fields"]["optimizer"].setup([torch.nn.Parameter(torch.zeros(4))])
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)


def test_fused_steps_and_state_match_plain_adam_and_load_into_each_other():
    generator = torch.Generator().manual_seed(0)
    start = [torch.randn(1000, generator=generator), torch.randn(16, 8, generator=generator)]
    grads = [[torch.randn(p.shape, generator=generator) for p in start] for _ in range(3)]
    fused_params = [torch.nn.Parameter(p.clone()) for p in start]
    plain_params = [torch.nn.Parameter(p.clone()) for p in start]
    fused = FusedAdamOptimizerConfig(lr=1e-2, eps=1e-15).setup(fused_params)
    plain = FusedAdamOptimizerConfig(lr=1e-2, eps=1e-15, fused=False).setup(plain_params)
    three_steps(fused, fused_params, grads)
    three_steps(plain, plain_params, grads)
    for a, b in zip(fused_params, plain_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    resumed_params = [torch.nn.Parameter(p.detach().clone()) for p in plain_params]
    resumed = FusedAdamOptimizerConfig(lr=1e-2, eps=1e-15).setup(resumed_params)
    resumed.load_state_dict(copy.deepcopy(plain.state_dict()))  # a checkpoint of plain Adam resumes
    assert resumed.param_groups[0]["fused"] is False  # ... with plain Adam: the flag is saved state
    three_steps(resumed, resumed_params, grads[:1])
    three_steps(plain, plain_params, grads[:1])
    for a, b in zip(resumed_params, plain_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_only_where_torch_has_the_kernel():
    assert fused_adam_supported([torch.zeros(2, requires_grad=True)])
    assert not fused_adam_supported([])
    assert not fused_adam_supported([torch.zeros(2, dtype=torch.int64)])

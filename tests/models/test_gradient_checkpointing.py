"""--pipeline.model.gradient-checkpointing: the same loss and gradients as a plain step, with less graph memory."""

from __future__ import annotations

import copy

import pytest
import torch

import accel_test_helpers
from nerfstudio_accel.bench.memory import saved_tensor_bytes
from nerfstudio_accel.methods import accel_nerfacto, accel_ngp


def trainer_for(method_name, scene, output_dir, hard_mining):
    method = {"accel-ngp": accel_ngp.config, "accel-nerfacto": accel_nerfacto.config}[method_name]
    model = {"implementation": "torch"} if method_name == "accel-nerfacto" else {}
    return accel_test_helpers.make_trainer(
        scene, output_dir, method=method, pipeline={"hard_mining": hard_mining, "min_hard_fraction": 0.3}, model=model
    )


@pytest.mark.parametrize("hard_mining", [False, True], ids=["ordinary", "mined"])
@pytest.mark.parametrize("method_name", ["accel-ngp", "accel-nerfacto"])
def test_checkpointed_step_has_the_same_gradients_and_a_smaller_graph(method_name, hard_mining, tiny_scene, tmp_path):
    torch.manual_seed(0)
    pipeline = trainer_for(method_name, tiny_scene, tmp_path, hard_mining).pipeline
    model = pipeline.model
    if method_name == "accel-ngp":
        with torch.no_grad():
            model.field.density_mlp.layers[-1].bias[0] += 4.0  # samples survive culling on the fresh grid
        model.sampler.update(0, model.field.density)
        model.sampler.warmed_up.fill_(True)
    ray_bundle, batch = pipeline.datamanager.next_train(0)
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    batch_sizer = copy.deepcopy(pipeline.batch_sizer)  # tau_hat moves with each mined step

    def step():
        model.zero_grad(set_to_none=True)
        pipeline.batch_sizer = copy.deepcopy(batch_sizer)
        torch.manual_seed(1)  # the same stratified jitter and hard-sample draw in both runs
        graph = {}
        if hard_mining:
            graph["bytes"] = saved_tensor_bytes(
                lambda: graph.update(loss=sum(pipeline.mined_loss(copy.deepcopy(ray_bundle), batch)[1].values()))
            )
        else:

            def ordinary():
                outputs = model(copy.deepcopy(ray_bundle))
                graph["loss"] = sum(
                    model.get_loss_dict(outputs, batch, model.get_metrics_dict(outputs, batch)).values()
                )

            graph["bytes"] = saved_tensor_bytes(ordinary)
        graph["loss"].backward()
        return (
            float(graph["loss"]),
            graph["bytes"],
            {name: None if p.grad is None else p.grad.clone() for name, p in params},
        )

    model.config.gradient_checkpointing = False
    plain_loss, plain_bytes, plain = step()
    model.config.gradient_checkpointing = True
    loss, graph_bytes, checkpointed = step()
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    assert graph_bytes < plain_bytes
    assert any(g is not None and g.abs().sum() > 0 for name, g in plain.items() if name.startswith("field."))
    for name, want in plain.items():
        got = checkpointed[name]
        assert (want is None) == (got is None), name
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7, msg=name)

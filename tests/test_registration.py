"""accel-ngp and accel-nerfacto are registered with nerfstudio, show up in ns-train, and a broken
install cannot take ns-train down."""

from __future__ import annotations

import json
import textwrap

METHOD = "accel-ngp"

MODEL_FLAGS = (
    "--pipeline.model.occupancy.backend {auto,nerfacc,kernel,torch}",
    "--pipeline.model.background {auto,random,white,black}",
    "--pipeline.model.occupancy.alpha-threshold",
    "--pipeline.model.occupancy.early-stop-eps",
    "--pipeline.model.proposal.num-samples",
    "--pipeline.model.scene-contraction {auto,on,off}",
    "--pipeline.target-num-samples",
    "--pipeline.hard-mining {auto,True,False}",
    "--pipeline.min-hard-fraction",
    "--precision {auto,fp32,fp16,bf16}",
    "--max-grad-norm",
    "--max-consecutive-skips",
)


def squash(text: str) -> str:
    """Whitespace collapsed to single spaces, so output wrapped by rich reads as one line."""
    return " ".join(text.split())


# --- in process --------------------------------------------------------------------------------


def test_discover_methods_returns_accel_ngp_trainer_config() -> None:
    from nerfstudio.engine.trainer import TrainerConfig
    from nerfstudio.plugins.registry import discover_methods

    from nerfstudio_accel.engine.trainer import AccelTrainerConfig
    from nerfstudio_accel.models.accel_ngp import AccelNGPModel, AccelNGPModelConfig
    from nerfstudio_accel.pipelines.hard_mining import HardSampleMiningPipeline, HardSampleMiningPipelineConfig

    methods, descriptions = discover_methods()

    assert METHOD in methods, sorted(methods)
    config = methods[METHOD]
    assert isinstance(config, TrainerConfig) and isinstance(config, AccelTrainerConfig)
    assert config.method_name == METHOD
    assert isinstance(config.pipeline, HardSampleMiningPipelineConfig)
    assert config.pipeline._target is HardSampleMiningPipeline and config.pipeline.hard_mining == "auto"
    assert isinstance(config.pipeline.model, AccelNGPModelConfig)
    assert config.pipeline.model._target is AccelNGPModel
    assert config.pipeline.model.occupancy.backend == "auto"
    # the fields' group, a split capture's shared appearance embedding's, and the camera optimizer's (SO3xR3)
    assert set(config.optimizers) == {"fields", "appearance", "camera_opt"}
    assert "nerfstudio-accel" in descriptions[METHOD]


def test_discover_methods_returns_accel_nerfacto_behind_the_mining_pipeline() -> None:
    from nerfstudio.plugins.registry import discover_methods

    from nerfstudio_accel.engine.trainer import AccelTrainerConfig
    from nerfstudio_accel.models.accel_nerfacto import AccelNerfactoModel
    from nerfstudio_accel.pipelines.hard_mining import HardSampleMiningPipeline

    methods, descriptions = discover_methods()
    config = methods["accel-nerfacto"]
    assert isinstance(config, AccelTrainerConfig)
    assert config.pipeline._target is HardSampleMiningPipeline and config.pipeline.hard_mining == "auto"
    assert config.pipeline.model._target is AccelNerfactoModel
    assert set(config.optimizers) == {"proposal_networks", "fields", "camera_opt"}
    assert "nerfstudio-accel" in descriptions["accel-nerfacto"]


def test_entry_point_object_is_a_method_specification() -> None:
    from importlib.metadata import entry_points

    from nerfstudio.plugins.types import MethodSpecification

    import nerfstudio_accel.methods as methods_module

    (entry_point,) = [ep for ep in entry_points(group="nerfstudio.method_configs") if ep.name == METHOD]
    assert entry_point.value == "nerfstudio_accel.methods:accel_ngp"
    spec = entry_point.load()
    assert isinstance(spec, MethodSpecification), repr(spec)
    assert spec is methods_module.accel_ngp


def test_unavailable_method_repr_is_one_line_naming_the_error() -> None:
    from nerfstudio.plugins.types import MethodSpecification

    from nerfstudio_accel.methods import UnavailableMethod

    stand_in = UnavailableMethod(METHOD, ImportError("libfoo.so: cannot open shared object file"))
    text = repr(stand_in)
    assert "\n" not in text
    assert METHOD in text and "unavailable" in text
    assert "ImportError: libfoo.so: cannot open shared object file" in text
    assert not isinstance(stand_in, MethodSpecification)  # what makes nerfstudio skip it

    # A multi-line error (e.g. a SyntaxError with its caret) still gives one line.
    try:
        compile("def broken(:\n", "broken.py", "exec")
    except SyntaxError as error:
        syntax_error = error
    text = repr(UnavailableMethod(METHOD, syntax_error))
    assert "\n" not in text and "SyntaxError" in text


def test_guarded_turns_a_failing_build_into_unavailable_method() -> None:
    from nerfstudio_accel.methods import UnavailableMethod, _guarded

    def failing_build():
        raise ModuleNotFoundError("No module named 'nerfacc'")

    result = _guarded(METHOD, failing_build)
    assert isinstance(result, UnavailableMethod)
    assert result.name == METHOD
    assert result.reason == "ModuleNotFoundError: No module named 'nerfacc'"

    sentinel = object()
    assert _guarded(METHOD, lambda: sentinel) is sentinel


# --- fresh interpreters ------------------------------------------------------------------------

ISOLATION_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["nerfstudio_accel.models.accel_ngp"] = None  # any import of it now raises ImportError
    from nerfstudio.plugins.registry import discover_methods
    plugins, _ = discover_methods()
    print("PLUGINS " + json.dumps(sorted(plugins)), flush=True)
    from nerfstudio.configs.method_configs import all_methods  # what ns-train builds its subcommands from
    print("ALL " + json.dumps(sorted(all_methods)), flush=True)
    """
)


def test_broken_plugin_import_leaves_nerfstudio_methods_working(run_cli) -> None:
    code, out, err = run_cli("python", "-c", ISOLATION_SCRIPT, timeout=120)

    assert code == 0, err[-3000:]
    assert "Traceback" not in out + err
    results = {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in out.splitlines()
        if line.startswith(("PLUGINS ", "ALL "))
    }
    assert METHOD not in results["PLUGINS"]
    assert METHOD not in results["ALL"]
    assert {"nerfacto", "instant-ngp", "accel-nerfacto"} <= set(results["ALL"]), "one broken method leaves the others"
    warning = squash(out + err)
    assert f"<{METHOD} unavailable: nerfstudio-accel failed to import (ModuleNotFoundError:" in warning
    assert "nerfstudio_accel.models.accel_ngp" in warning


def test_ns_train_help_lists_accel_methods(run_cli) -> None:
    code, out, err = run_cli("ns-train", "--help", timeout=120)

    assert code == 0, err[-3000:]
    assert "Traceback" not in out + err
    usage = squash(out)
    for method in (METHOD, "accel-nerfacto"):
        assert "{" in usage and f",{method}," in usage.replace("{", ",").replace("}", ","), method
    assert "Instant-NGP through an occupancy grid" in usage  # our description, next to the method name


def test_ns_train_accel_ngp_help_shows_model_flags(run_cli) -> None:
    code, out, err = run_cli("ns-train", METHOD, "--help", timeout=120)

    assert code == 0, err[-3000:]
    assert "Traceback" not in out + err
    for flag in MODEL_FLAGS:
        assert flag in out, flag
    for superseded in ("--mixed-precision", "--use-grad-scaler"):  # set from --precision
        assert superseded not in out, superseded
    assert "blender-data" in out  # the data parser subcommands follow

"""The catalogue: nerfstudio ``MethodSpecification`` objects named by this package's entry points.

nerfstudio loads every ``nerfstudio.method_configs`` entry point when ``ns-train`` starts and does
not guard the import, so an error here would take down ``ns-train`` for every method. Each spec is
therefore built inside a guard: on failure the entry point yields an :class:`UnavailableMethod`,
which nerfstudio skips with a one-line warning, and its own methods keep working; so does a library older
than this package's floors (:mod:`~nerfstudio_accel.version_floors`). Loading it also makes
nerfstudio's tools print this package's user errors as one line (:func:`~nerfstudio_accel.errors.install_exit_hook`)
and, as ns-train loads it before parsing its flags, stops a flag of ours that moved with one line naming its new
name (:func:`~nerfstudio_accel.renamed_flags.refuse_moved_flags`).
"""

from __future__ import annotations

import sys
import traceback
import warnings
from typing import Callable, Union

from nerfstudio.plugins.types import MethodSpecification

from nerfstudio_accel.errors import AccelError, install_exit_hook
from nerfstudio_accel.renamed_flags import refuse_moved_flags
from nerfstudio_accel.version_floors import check_version_floors

install_exit_hook()
if "accel-ngp" in sys.argv[1:]:  # the names moved in accel-ngp only; other methods keep theirs
    refuse_moved_flags(sys.argv[1:])
# nerfstudio 1.1's cameras index tensors with lists, which torch >= 2.9 warns about on every run (harmless there)
warnings.filterwarnings(
    "ignore", message="Using a non-tuple sequence for multidimensional indexing", module=r"nerfstudio\.cameras\."
)


class UnavailableMethod:
    """Stands in for a method whose code failed to import or whose libraries are too old; its repr is the
    one-line reason."""

    def __init__(self, name: str, error: BaseException) -> None:
        self.name = name
        self.user_error = isinstance(error, AccelError)
        self.reason = "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()[-1]
        if self.user_error:
            self.reason = str(error)

    def __repr__(self) -> str:
        if self.user_error:
            return f"<{self.name} unavailable: {self.reason}>"
        return f"<{self.name} unavailable: nerfstudio-accel failed to import ({self.reason})>"


def _guarded(name: str, build: Callable[[], MethodSpecification]) -> Union[MethodSpecification, UnavailableMethod]:
    try:
        check_version_floors()
        return build()
    except Exception as error:  # any import-time failure must not escape into ns-train
        return UnavailableMethod(name, error)


def _accel_ngp() -> MethodSpecification:
    from nerfstudio.configs.base_config import ViewerConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from nerfstudio_accel.data.prefetching_datamanager import AccelDataManagerConfig
    from nerfstudio_accel.engine.optimizers import FusedAdamOptimizerConfig
    from nerfstudio_accel.engine.schedulers import FloatExponentialDecaySchedulerConfig
    from nerfstudio_accel.engine.trainer import AccelTrainerConfig
    from nerfstudio_accel.models.accel_ngp import AccelNGPModelConfig
    from nerfstudio_accel.pipelines.hard_mining import HardSampleMiningPipelineConfig
    from nerfstudio_accel.spatial.block_field import APPEARANCE_GROUP

    config = AccelTrainerConfig(
        method_name="accel-ngp",
        steps_per_eval_batch=500,
        steps_per_eval_image=500,
        steps_per_save=2000,
        max_num_iterations=30000,
        pipeline=HardSampleMiningPipelineConfig(
            datamanager=AccelDataManagerConfig(dataparser=NerfstudioDataParserConfig(), eval_num_rays_per_batch=4096),
            model=AccelNGPModelConfig(eval_num_rays_per_chunk=8192),
        ),
        optimizers={
            "fields": {  # beta2 0.99 (instant-ngp's): docs/trainer.md#adams-second-moment
                "optimizer": FusedAdamOptimizerConfig(lr=1e-2, betas=(0.9, 0.99), eps=1e-15),
                "scheduler": FloatExponentialDecaySchedulerConfig(lr_final=1e-4, max_steps=200000),
            },
            APPEARANCE_GROUP: {  # a split capture's appearance embedding, which its blocks share: as the fields
                "optimizer": FusedAdamOptimizerConfig(lr=1e-2, betas=(0.9, 0.99), eps=1e-15),
                "scheduler": FloatExponentialDecaySchedulerConfig(lr_final=1e-4, max_steps=200000),
            },
            "camera_opt": {  # used with --pipeline.model.camera-optimizer.mode SO3xR3
                "optimizer": FusedAdamOptimizerConfig(lr=1e-3, eps=1e-15),
                "scheduler": FloatExponentialDecaySchedulerConfig(lr_final=1e-4, max_steps=5000),
            },
        },
        viewer=ViewerConfig(num_rays_per_chunk=1 << 12),
        vis="viewer",
    )
    return MethodSpecification(
        config=config,
        description="Instant-NGP through an occupancy grid (object scenes) or proposal fields (captures), on CPU or GPU (nerfstudio-accel).",
    )


accel_ngp = _guarded("accel-ngp", _accel_ngp)


def _accel_nerfacto() -> MethodSpecification:
    from nerfstudio.cameras.camera_optimizers import CameraOptimizerConfig
    from nerfstudio.configs.base_config import ViewerConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
    from nerfstudio.engine.optimizers import AdamOptimizerConfig

    from nerfstudio_accel.data.prefetching_datamanager import AccelDataManagerConfig
    from nerfstudio_accel.engine.schedulers import FloatExponentialDecaySchedulerConfig
    from nerfstudio_accel.engine.trainer import AccelTrainerConfig
    from nerfstudio_accel.models.accel_nerfacto import AccelNerfactoModelConfig
    from nerfstudio_accel.pipelines.hard_mining import HardSampleMiningPipelineConfig

    def adam(lr: float, lr_final: float, max_steps: int) -> dict:
        return {
            "optimizer": AdamOptimizerConfig(lr=lr, eps=1e-15),
            "scheduler": FloatExponentialDecaySchedulerConfig(lr_final=lr_final, max_steps=max_steps),
        }

    config = AccelTrainerConfig(
        method_name="accel-nerfacto",
        steps_per_eval_batch=500,
        steps_per_save=2000,
        max_num_iterations=30000,
        pipeline=HardSampleMiningPipelineConfig(
            datamanager=AccelDataManagerConfig(dataparser=NerfstudioDataParserConfig(), eval_num_rays_per_batch=4096),
            model=AccelNerfactoModelConfig(
                eval_num_rays_per_chunk=1 << 15,
                average_init_density=0.01,
                camera_optimizer=CameraOptimizerConfig(mode="SO3xR3"),
            ),
        ),
        optimizers={
            "proposal_networks": adam(1e-2, 1e-4, 200000),
            "fields": adam(1e-2, 1e-4, 200000),
            "camera_opt": adam(1e-3, 1e-4, 5000),
        },
        viewer=ViewerConfig(num_rays_per_chunk=1 << 15),
        vis="viewer",
    )
    return MethodSpecification(
        config=config,
        description="nerfacto with hard sample mining on its main field (nerfstudio-accel).",
    )


accel_nerfacto = _guarded("accel-nerfacto", _accel_nerfacto)

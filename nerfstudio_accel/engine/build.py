"""Build a method's trainer config the way ``ns-train`` does, for the bench, tests and benchmark scripts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import tyro
from nerfstudio.data.dataparsers.base_dataparser import DataParserConfig
from nerfstudio.engine.trainer import TrainerConfig

from nerfstudio_accel.engine.trainer import AccelTrainerConfig
from nerfstudio_accel.renamed_flags import refuse_moved_flags


def build_trainer_config(
    method: Union[str, TrainerConfig],
    data: Path,
    device: str = "cpu",
    dataparser: Optional[DataParserConfig] = None,
    flags: Sequence[str] = (),
    output_dir: Path = Path("outputs"),
    eval_split: str = "val",
    configure: Optional[Callable[[TrainerConfig], None]] = None,
    resolve: bool = True,
) -> TrainerConfig:
    """The config ``ns-train <method> <flags> --data <data> --machine.device-type <device>`` trains with.

    ``method``: a registered method's name or a config (copied, never changed). ``dataparser``: replaces the
    method's (as ns-train's parser subcommand does). ``configure`` edits the config after the flags, as a
    caller's last word. An accel method's config is then resolved as ns-train resolves it before saving
    config.yml (:meth:`AccelTrainerConfig.resolve`, checking the training and ``eval_split`` views); with
    ``resolve`` False that is left to ``save_config``, as in ns-train.
    Raises :class:`~nerfstudio_accel.errors.AccelError` for bad data or choices, ``SystemExit`` (tyro's
    message on stderr) for bad flags.
    """
    if isinstance(method, str):
        from nerfstudio.configs.method_configs import all_methods

        method = all_methods[method]
    config = copy.deepcopy(method)
    if flags:
        if config.method_name == "accel-ngp":  # other methods (nerfacto, accel-nerfacto) keep these names
            refuse_moved_flags(flags)
        config = tyro.cli(tyro.conf.FlagConversionOff[type(config)], default=config, args=list(flags))
    datamanager = config.pipeline.datamanager
    if dataparser is not None:
        datamanager.dataparser = copy.deepcopy(dataparser)
    datamanager.data, datamanager.dataparser.data = (
        Path(data),
        Path(data),
    )  # ns-train's --data, as its datamanager passes it on
    config.machine.device_type = device
    config.vis = "tensorboard"
    config.output_dir = Path(output_dir)
    if configure is not None:
        configure(config)
    if resolve and isinstance(config, AccelTrainerConfig):
        config.resolve(eval_split)
    return config

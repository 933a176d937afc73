"""The options every command shares, declared once (detectron2's `default_argument_parser`).

A command's options class derives from the groups it takes: `ConfigOptions` (the config name,
`--config-dir`, `--set`), `SnapshotOptions` (`--testiter`), `DeviceOptions` (`--device`),
`DebugOptions` (`--debug`) and `DataOptions` (`--data`, `--name`, `--no-fit`: train and check).
The fields are declared with `core.utils.options.option`; the parser is built from them
(cornernet/options.py) and the API builds the same value with keywords.

`overrides` holds (key, value) pairs: from the command line `--set max_iter=2` gives
`(("max_iter", 2),)`, from the API `max_iter=2` gives the same pair, with no text between.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..utils.options import option
from .overrides import DEFAULT_SNAPSHOT, setting, snapshot_or_file_arg
from .system import CONFIG_DIR

Overrides = tuple[tuple[str, Any], ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfigOptions:
    """A config by name, where configs live, and settings changed on the command line."""

    cfg_file: str = option(help="config name: configs/<cfg_file>.json (or a run's name)")
    config_dir: Path = option(CONFIG_DIR, "--config-dir", parse=Path,
                              help="folder of the <cfg_file>.json files")
    overrides: Overrides = option((), "--set", parse=setting, nargs="+", metavar="KEY=VALUE",
                                  help="change settings of the config, e.g. --set "
                                       "system.max_iter=2 db.input_size=[255,255] (a JSON "
                                       "value, or text)")

    def __post_init__(self) -> None:
        # The API may give a {key: value} mapping or a list; the value holds a tuple of pairs.
        overrides = self.overrides
        if isinstance(overrides, dict):
            overrides = tuple(overrides.items())
        object.__setattr__(self, "overrides", tuple(tuple(item) if isinstance(item, list)
                                                    else item for item in overrides or ()))
        object.__setattr__(self, "config_dir", Path(self.config_dir))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SnapshotOptions:
    """Which snapshot: an iteration, "best", or a snapshot file."""

    testiter: int | str | Path | None = option(
        None, "--testiter", parse=snapshot_or_file_arg,
        help=f"snapshot iteration, 'best' for the snapshot with the highest validation AP "
             f"during training, or a snapshot file of the config (<Cfg>_<iter>.pkl; "
             f"{DEFAULT_SNAPSHOT})")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceOptions:
    """Where the network runs."""

    device: str | None = option(None, "--device",
                                help="cuda, cuda:1 or cpu (default: the current GPU, else cpu)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DebugOptions:
    """Tracebacks with every error (as CORNERNET_DEBUG=1)."""

    debug: bool = option(False, "--debug", help="tracebacks with every error")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataOptions:
    """An export to train on, as it comes (core/data/from_data.py): `cornernet train` and
    `cornernet check` take it alike."""

    data: Path | None = option(None, "--data", parse=Path, metavar="PATH",
                               help="train on this export: a data.yaml, a COCO json, or a folder "
                                    "(Roboflow, CVAT, YOLO, VOC, labelImg); the config gives the "
                                    "model and the training settings, the data its classes and "
                                    "splits")
    name: str | None = option(None, "--name",
                              help="with --data: the run's name, which test, predict, export and "
                                   "--iter then take in place of a config (default: "
                                   "<config>-<data folder>)")
    no_fit: bool = option(False, "--no-fit",
                          help="with --data: keep the config's input size, crop scales and test "
                               "scales instead of fitting them to the data's sizes")

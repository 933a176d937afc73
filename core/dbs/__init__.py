"""Datasets by name: `datasets[system.dataset](db_config, split=..., settings=...)`, where
`settings` is `system_config.dataset_settings()`; the original's `sys_config=system_config`
is taken too.

`register_dataset(name, cls)` adds one, here or from outside the project: its class declares the
db keys it reads (`db_keys`), and registering it hands them to the config schema, the refusal of
another dataset's keys and the node agreement (core/config/db_keys.py).
"""

from core.config.db_keys import declare

from .coco import COCO
from .detection import DETECTION, DatasetError
from .shapes import Shapes
from .voc import VOC
from .yolo import YOLO

datasets: dict[str, type[DETECTION]] = {}


def register_dataset(name: str, cls: type[DETECTION]) -> type[DETECTION]:
    """Make `cls` the dataset `system.dataset: name` and declare its db keys; returns it."""
    declare(name, cls.db_keys)
    datasets[name] = cls
    return cls


for _cls in (COCO, Shapes, VOC, YOLO):
    register_dataset(_cls.__name__, _cls)

__all__ = ["COCO", "DETECTION", "VOC", "YOLO", "DatasetError", "Shapes", "datasets",
           "register_dataset"]

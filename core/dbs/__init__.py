"""Datasets by name: `datasets[system.dataset](db_config, split=..., settings=...)`, where
`settings` is `system_config.dataset_settings()`; the original's `sys_config=system_config`
is taken too."""

from .coco import COCO
from .detection import DETECTION, DatasetError
from .shapes import Shapes
from .voc import VOC
from .yolo import YOLO

datasets = {"COCO": COCO, "Shapes": Shapes, "VOC": VOC, "YOLO": YOLO}

__all__ = ["COCO", "DETECTION", "VOC", "YOLO", "DatasetError", "Shapes", "datasets"]

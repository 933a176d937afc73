"""Datasets by name: `datasets[system.dataset](db_config, split=..., sys_config=...)`."""

from .coco import COCO
from .detection import DETECTION, DatasetError
from .shapes import Shapes
from .voc import VOC
from .yolo import YOLO

datasets = {"COCO": COCO, "Shapes": Shapes, "VOC": VOC, "YOLO": YOLO}

__all__ = ["COCO", "DETECTION", "VOC", "YOLO", "DatasetError", "Shapes", "datasets"]

"""Datasets by name: `datasets[system.dataset](db_config, split=..., sys_config=...)`."""

from .coco import COCO
from .detection import DETECTION, DatasetError
from .shapes import Shapes

datasets = {"COCO": COCO, "Shapes": Shapes}

__all__ = ["COCO", "DETECTION", "DatasetError", "Shapes", "datasets"]

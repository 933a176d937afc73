"""What a coco128 folder holds, read from its annotation files: the tests run on the full set
(../shared, CORNERNET_DATA) or on the repository's subset (tests/data/coco128-mini) and derive
every count they assert from the files they were given."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ALL, TRAIN, VAL = ("instances_coco128.json", "instances_coco128_train.json",
                   "instances_coco128_val.json")


@dataclass(frozen=True)
class Facts:
    images: int  # image entries
    image_ids: tuple[int, ...]  # sorted
    annotations: int
    crowds: int  # iscrowd=1 regions
    category_ids: frozenset[int]  # the categories that occur


def facts(coco128: Path, name: str = ALL) -> Facts:
    content = json.loads((coco128 / "annotations" / name).read_text())
    anns = content["annotations"]
    return Facts(len(content["images"]), tuple(sorted(i["id"] for i in content["images"])),
                 len(anns), sum(bool(a["iscrowd"]) for a in anns),
                 frozenset(a["category_id"] for a in anns))

"""One split is not two: a seeded validation share held out of an export that has one split.

An image is held out when the hash of its file name (the last part, sha1 with the seed) falls
below the fraction: the same images on every run and machine, whatever the order or the folder
the export was unpacked to, and an image added later does not move the others. The split is
read once by its own dataset (so YOLO and VOC labels go through their readers' rules) and
written as two COCO files, `train.json` and `val.json`, into the run folder; the run then
reads them as COCO, with the export's image folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from core.config import DatasetSettings
from core.utils.files import write_file_atomic

from .detection import DETECTION, DatasetError, Log

FRACTION = 0.2
SEED = 0


def _score(file_name: str, seed: int) -> float:
    """The image's place in 0..1: sha1 of the seed and the last part of its file name."""
    name = file_name.replace("\\", "/").rsplit("/", 1)[-1]
    digest = hashlib.sha1(f"{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def held_out(file_name: str, fraction: float = FRACTION, seed: int = SEED) -> bool:
    """Whether the image `file_name` (its last part counts) is in the validation share."""
    return _score(file_name, seed) < fraction


def hold_out(dataset: type[DETECTION], db: dict, split: str, settings: DatasetSettings,
             folder: Path, log: Log, fraction: float = FRACTION, seed: int = SEED
             ) -> tuple[dict, dict]:
    """COCO db settings (`image_dirs`, `annotation_files` for "train" and "val") of `split`
    read by `dataset` and cut in two by `held_out`, the files written into `folder`; and the
    record of the cut (fraction, seed, the image counts). At least one image goes to each side
    (with fewer than two images the split is refused)."""
    db_split = dataset(db, split=split, settings=settings, log=log)
    content = json.loads(Path(db_split.annotation_file).read_bytes())
    images = content.get("images", [])
    if len(images) < 2:
        raise DatasetError(f"split '{split}' has {len(images)} image(s): too few to hold out a "
                           f"validation share; add images, or give a validation split")
    val_ids = {image["id"] for image in images if held_out(image["file_name"], fraction, seed)}
    if not val_ids or len(val_ids) == len(images):  # a tiny set: one image changes side
        order = sorted(images, key=lambda im: _score(im["file_name"], seed))
        val_ids = {order[0]["id"]} if not val_ids else val_ids - {order[-1]["id"]}
    files = {}
    for part, keep in (("train", lambda i: i not in val_ids), ("val", lambda i: i in val_ids)):
        subset = {**content,
                  "images": [im for im in images if keep(im["id"])],
                  "annotations": [a for a in content.get("annotations", [])
                                  if keep(a["image_id"])]}
        files[part] = folder / f"{part}.json"
        text = json.dumps(subset).encode()
        write_file_atomic(files[part], lambda file, text=text: file.write(text))
    # the image folder: the image's path less the folders its file name holds
    image_dir = str(Path(db_split.image_path(0)).parents[len(Path(db_split.image_ids(0)).parts)
                                                          - 1])
    settings_out = {"image_dirs": {"train": image_dir, "val": image_dir},
                    "annotation_files": {k: str(v) for k, v in files.items()}}
    record = {"split": split, "fraction": fraction, "seed": seed,
              "rule": "sha1(f'{seed}/{file name}') < fraction",
              "train_images": len(images) - len(val_ids), "val_images": len(val_ids)}
    return settings_out, record

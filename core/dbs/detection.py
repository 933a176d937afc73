"""DETECTION: the interface every dataset offers to the samplers and the evaluator.

Construction: `datasets[name](db_config, split=<split key>, settings=DatasetSettings, log=...)`,
where `settings` holds the system values a dataset reads (`SystemConfig.dataset_settings()`)
and `log` takes its warnings. The original's form `datasets[name](db_config, split=...,
sys_config=system_config)` is kept: it takes the settings from the config. `db_config` is the raw
"db" dict of a config. It is checked with `check_db_config` and kept whole
(defaults filled in) as `.configs`. `split=None` builds an object holding the configs, the colour
statistics and (where known without files) the classes; it touches no file.

Indices. Every per-image method takes a *dataset index* `ind` in `0 .. len(db) - 1`, which is what
`db_inds` holds. `db_inds` is the order in which a sampler walks the images: `shuffle_inds()`
permutes it with `db.rng`, and it may be replaced (`db.db_inds = ...`), e.g. to take one rank's
share. A sampler reads `ind = db.db_inds[k]` and then `db.image_path(ind)`, `db.detections(ind)`;
the methods never look through `db_inds` a second time.

Per image:
  image_ids(ind)   -> str         the file name inside the image folder
  image_id(ind)    -> int         the COCO image id (for evaluation)
  image_path(ind)  -> str         absolute path of the image file
  read_image(ind)  -> (H, W, 3) uint8 BGR; raises core.utils.images.ImageReadError (an OSError
                      with `.path`) for a missing, unreadable or truncated file
  detections(ind)  -> (N, 5) float32 [x1, y1, x2, y2, cls], cls in 1..num_classes; crowd regions
                      are never in it; an image without objects gives (0, 5)
  crowd_boxes(ind) -> (K, 4) float32 [x1, y1, x2, y2] of the crowd (iscrowd=1) regions

Boxes are in pixels with x2 = x + w as in COCO (0-indexed, the image spans [0, W] x [0, H]).

Classes: contiguous `cls` 1..C <-> original category ids: `cls2coco(cls)`, `coco2cls(cat_id)`,
`cls2name(cls)`, `class_ids` (the original ids, sorted, `class_ids[cls - 1] == cls2coco(cls)`),
`num_classes` (== configs["categories"]).

Statistics for normalisation and PCA lighting, the original COCO values: `mean`, `std` (3,)
float32 in BGR order, `eig_val` (3,) float32, `eig_vec` (3, 3) float32.

Randomness: `rng` is a numpy Generator owned by the dataset, seeded from the system seed (the
default's when no settings are given) and the split name unless replaced with
`set_rng(generator)`; no global random state is used.

Evaluation: `annotation_file` (Path of the instances json, None when split is None),
`has_annotations` (False for test-dev style files without an "annotations" list).
`load_problems`: the messages (also logged) about labels the loader left out, clipped or dropped.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from core.config import DatasetSettings, SystemConfig, check_db_config
from core.config.db_keys import DbKey
from core.errors import UserMistake
from core.utils.images import read_image

# A callable that takes one line of text: where a dataset says what it warns about.
Log = Callable[[str], None]


def to_stderr(text: str) -> None:
    """The default `log`: the line on stderr, as a script would show a warning."""
    print(text, file=sys.stderr)


def quiet(text: str) -> None:
    """A `log` that says nothing: for the copies of a split that a run has loaded and said
    about already (a prefetch worker's)."""


def said_once(log: Log) -> Log:
    """`log`, saying each distinct line once: a split loaded again in one run (for the
    evaluation, the validation loss, the batch picture) repeats none of its loader's lines,
    each of which already counts what it found ("clipped to the image: 12 box(es), e.g. ...")."""
    said: set[str] = set()

    def say(text: str) -> None:
        if text not in said:
            said.add(text)
            log(text)

    return say


class DatasetError(UserMistake, ValueError):
    """An annotation file or dataset setting is wrong; the message names the file and entry."""


class DETECTION:
    """Base of the detection datasets: configs, statistics, per-image tables, order and classes.

    Subclasses fill the tables with `_set_images` and `_set_classes`.
    """

    # The db keys this dataset reads beyond the common ones, with which are paths
    # (core/config/db_keys.py); registering the dataset declares them to the config schema.
    db_keys: ClassVar[dict[str, DbKey]] = {}

    def __init__(self, db_config: dict, split: str | None = None,
                 settings: DatasetSettings | None = None, log: Log = to_stderr, *,
                 sys_config: SystemConfig | None = None) -> None:
        if sys_config is not None:  # the original's call form
            if settings is not None:
                raise TypeError("give a dataset its settings or a sys_config, not both")
            settings = sys_config.dataset_settings()
        self._settings = settings
        # Where the loader's warnings go (labels left out, a dataset cache it cannot use).
        self.log = log
        self._configs = check_db_config(db_config)
        self._split = split

        self._mean = np.array([0.40789654, 0.44719302, 0.47026115], dtype=np.float32)
        self._std = np.array([0.28863828, 0.27408164, 0.27809835], dtype=np.float32)
        self._eig_val = np.array([0.2141788, 0.01817699, 0.00341571], dtype=np.float32)
        self._eig_vec = np.array([
            [-0.58752847, -0.69563484, 0.41340352],
            [-0.5832747, 0.00994535, -0.81221408],
            [-0.56089297, 0.71832671, 0.41158938],
        ], dtype=np.float32)

        seed = (settings or SystemConfig()).seed
        # crc32, not hash(): str hashes change between processes.
        self._rng = np.random.default_rng([seed, zlib.crc32((split or "").encode())])

        self._image_dir: Path | None = None
        self._file_names: list[str] = []
        self._coco_ids = np.zeros((0,), dtype=np.int64)
        self._detections: list[np.ndarray] = []
        self._crowds: list[np.ndarray] = []
        self._db_inds = np.zeros((0,), dtype=np.int64)
        self._annotation_file: Path | None = None
        self._has_annotations = False
        self._load_problems: list[str] = []

        self._class_ids: list[int] = []
        self._class_names: list[str] = []
        self._coco2cls: dict[int, int] = {}

    # ---- tables, filled by subclasses -------------------------------------------------------
    def _set_images(self, image_dir: Path, file_names: list[str], coco_ids: np.ndarray,
                    detections: list[np.ndarray], crowds: list[np.ndarray]) -> None:
        """Per-image tables: detections (N, 5) float32 and crowds (K, 4) float32 per image."""
        self._image_dir = image_dir
        self._file_names = file_names
        self._coco_ids = np.asarray(coco_ids, dtype=np.int64)
        self._detections = detections
        self._crowds = crowds
        self._db_inds = np.arange(len(file_names), dtype=np.int64)

    def _set_classes(self, class_ids: list[int], class_names: list[str]) -> None:
        """`class_ids` sorted original ids; contiguous class c is `class_ids[c - 1]`."""
        self._class_ids = list(class_ids)
        self._class_names = list(class_names)
        self._coco2cls = {cat_id: cls for cls, cat_id in enumerate(self._class_ids, start=1)}

    # ---- configs and statistics -------------------------------------------------------------
    @property
    def configs(self) -> dict[str, Any]:
        return self._configs

    @property
    def mean(self) -> np.ndarray:
        return self._mean

    @property
    def std(self) -> np.ndarray:
        return self._std

    @property
    def eig_val(self) -> np.ndarray:
        return self._eig_val

    @property
    def eig_vec(self) -> np.ndarray:
        return self._eig_vec

    @property
    def split(self) -> str | None:
        return self._split

    # ---- order and randomness ---------------------------------------------------------------
    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    def set_rng(self, generator: np.random.Generator) -> None:
        self._rng = generator

    @property
    def db_inds(self) -> np.ndarray:
        """(M,) int64 dataset indices in sampling order."""
        return self._db_inds

    @db_inds.setter
    def db_inds(self, inds: np.ndarray) -> None:
        inds = np.asarray(inds, dtype=np.int64).reshape(-1)
        if inds.size and (inds.min() < 0 or inds.max() >= len(self)):
            raise IndexError(f"db_inds must lie in 0..{len(self) - 1}, got {inds.min()}.."
                             f"{inds.max()}")
        self._db_inds = inds

    def shuffle_inds(self) -> None:
        """Permute `db_inds` with `self.rng`."""
        self._db_inds = self._db_inds[self._rng.permutation(len(self._db_inds))]

    def __len__(self) -> int:
        return len(self._file_names)

    # ---- per image --------------------------------------------------------------------------
    def image_ids(self, ind: int) -> str:
        return self._file_names[ind]

    def image_id(self, ind: int) -> int:
        return int(self._coco_ids[ind])

    def image_path(self, ind: int) -> str:
        if self._image_dir is None:
            raise ValueError("this dataset was built with split=None and has no images")
        return str(self._image_dir / self._file_names[ind])

    def read_image(self, ind: int) -> np.ndarray:
        """(H, W, 3) uint8 BGR; ImageReadError names the file when it cannot be read whole."""
        return read_image(self.image_path(ind))

    def detections(self, ind: int) -> np.ndarray:
        """(N, 5) float32 [x1, y1, x2, y2, cls]; a copy the caller may change."""
        return self._detections[ind].copy()

    def crowd_boxes(self, ind: int) -> np.ndarray:
        """(K, 4) float32 [x1, y1, x2, y2]; a copy the caller may change."""
        return self._crowds[ind].copy()

    # ---- classes ----------------------------------------------------------------------------
    @property
    def class_ids(self) -> list[int]:
        return list(self._class_ids)

    @property
    def num_classes(self) -> int:
        return self._configs["categories"]

    def _check_cls(self, cls: int) -> int:
        if not 1 <= cls <= len(self._class_ids):
            raise KeyError(f"class {cls} is not in 1..{len(self._class_ids)}")
        return int(cls) - 1

    def cls2coco(self, cls: int) -> int:
        return self._class_ids[self._check_cls(cls)]

    def coco2cls(self, cat_id: int) -> int:
        if cat_id not in self._coco2cls:
            raise KeyError(f"category id {cat_id} is not one of {self._class_ids}")
        return self._coco2cls[cat_id]

    def cls2name(self, cls: int) -> str:
        return self._class_names[self._check_cls(cls)]

    def use_names(self, names: list[str], class_ids: list[int]) -> bool:
        """Name the classes `names` (those a snapshot records) where `class_ids` are this
        dataset's own, so that tables and pictures say what the detector was trained to call
        them; returns whether they were taken (other ids: the dataset's names stay)."""
        if list(class_ids) != self._class_ids or len(names) != len(class_ids):
            return False
        self._class_names = list(names)
        return True

    # ---- evaluation -------------------------------------------------------------------------
    @property
    def annotation_file(self) -> Path | None:
        return self._annotation_file

    @property
    def has_annotations(self) -> bool:
        return self._has_annotations

    @property
    def load_problems(self) -> list[str]:
        """What loading the labels left out, clipped or dropped, one message per kind."""
        return list(self._load_problems)

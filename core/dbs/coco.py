"""COCO: any COCO-format "instances" json with its image folder.

Default layout (as the original): `<data_dir>/coco/images/<folder>` and
`<data_dir>/coco/annotations/instances_<folder>.json`, with the split keys trainval, minival and
testdev naming the folders trainval2014, minival2014 and testdev2017. Any other COCO-format
dataset is used by config alone: db.image_dirs and db.annotation_files map split keys to paths
(relative ones resolve against the project root).

The json's first parse (reading, checking and indexing it) is core/dbs/coco_parse.py; its result
is cached here under `<cache_dir>/dbs/`, keyed by the file's path, size, mtime and sha1, so an
edited file is never served from a stale cache.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
import zlib
from pathlib import Path
from typing import ClassVar

import numpy as np

from core.config import ConfigError, DatasetSettings, SystemConfig, lookup
from core.config.db_keys import BUILTIN, DbKey, declared_keys, owners
from core.utils.files import StorageError, remove_stale_temp_files, write_file_atomic
from core.utils.images import ImageReadError, read_image

from .coco_parse import parse_instances
from .detection import DETECTION, DatasetError, Log, to_stderr

_DEFAULT_FOLDERS = {"trainval": "trainval2014", "minival": "minival2014", "testdev": "testdev2017"}
# Part of the cache key: bump it when the parsed format or the box rules change.
_CACHE_VERSION = 3  # 2: clipped_images, 3: the two kinds of dropped boxes


class COCO(DETECTION):
    """A COCO-format detection dataset; see DETECTION for the interface."""

    # Split key -> image folder and split key -> annotation json (both paths).
    db_keys: ClassVar[dict[str, DbKey]] = BUILTIN["COCO"]

    def __init__(self, db_config: dict, split: str | None = None,
                 settings: DatasetSettings | None = None, log: Log = to_stderr, *,
                 sys_config: SystemConfig | None = None) -> None:
        super().__init__(db_config, split, settings, log, sys_config=sys_config)
        # The db keys other datasets declare, refused rather than ignored when set.
        declared = declared_keys()
        for key in sorted(set(declared) - set(self.db_keys)):
            if self._configs[key] != declared[key].default:
                raise ConfigError(f"db.{key} is not read by system.dataset "
                                  f"'{type(self).__name__}'; remove it, or choose the dataset "
                                  f"it belongs to ({' or '.join(owners(key))})")
        if split is not None:
            self._load_split(split, self._settings)

    def _load_split(self, split: str, settings: DatasetSettings | None) -> None:
        if settings is None:
            raise ValueError(f"{type(self).__name__}(split='{split}') needs settings (or "
                             f"sys_config)")
        image_dir, annotation_file = self._split_files(split, settings)
        self._load(image_dir, annotation_file, settings.cache_dir / "dbs",
                   training=split == settings.train_split)

    def _split_files(self, split: str, settings: DatasetSettings) -> tuple[Path, Path]:
        """(image folder, annotation json) of `split`."""
        image_dirs = self._configs["image_dirs"]
        annotation_files = self._configs["annotation_files"]
        if image_dirs is None and annotation_files is None:
            folder = lookup(_DEFAULT_FOLDERS, split, "COCO split")
            coco_dir = settings.data_dir / "coco"
            return (coco_dir / "images" / folder,
                    coco_dir / "annotations" / f"instances_{folder}.json")
        if image_dirs is None or annotation_files is None:
            raise ConfigError("db.image_dirs and db.annotation_files go together: set both, "
                              "mapping each split key to a path")
        if set(image_dirs) != set(annotation_files):
            raise ConfigError(f"db.image_dirs has splits {sorted(image_dirs)} but "
                              f"db.annotation_files has {sorted(annotation_files)}")
        lookup(annotation_files, split, "split")
        return settings.resolve(image_dirs[split]), settings.resolve(annotation_files[split])

    def _load(self, image_dir: Path, annotation_file: Path, cache_dir: Path,
              training: bool) -> None:
        if not annotation_file.is_file():
            raise FileNotFoundError(f"annotation file not found: {annotation_file} "
                                    f"(split '{self._split}')")
        if not image_dir.is_dir():
            raise FileNotFoundError(f"image folder not found: {image_dir} (split "
                                    f"'{self._split}', annotations {annotation_file})")
        parsed = _cached_parse(annotation_file, cache_dir, self.log)
        categories = parsed["category_ids"]
        if len(categories) != self._configs["categories"]:
            raise DatasetError(f"db.categories is {self._configs['categories']} but "
                               f"{annotation_file} has {len(categories)} categories; set "
                               f"db.categories to {len(categories)}")
        if training:
            _check_trainable(parsed, annotation_file, self._split)
        for message in parsed["problems"]:
            self.log(message)
        self._load_problems += parsed["problems"]
        for message in _size_disagreements(parsed["clipped_images"], image_dir, annotation_file):
            self.log(message)

        self._set_classes(categories, parsed["category_names"])
        self._set_images(image_dir, parsed["file_names"], parsed["image_ids"],
                         _per_image(parsed["boxes"], parsed["box_counts"]),
                         _per_image(parsed["crowds"], parsed["crowd_counts"]))
        self._annotation_file = annotation_file
        self._has_annotations = parsed["has_annotations"]


def _size_disagreements(examples: list, image_dir: Path, annotation_file: Path) -> list[str]:
    """Boxes clipped to an image often mean the file's sizes are not the images' (annotations
    made for resized copies): the images of a few clipped boxes are measured, and a size that
    disagrees is said, with what to fix."""
    found = []
    for file_name, width, height in examples:
        try:
            real = read_image(image_dir / file_name).shape[:2]
        except ImageReadError:
            continue
        if (real[1], real[0]) != (width, height):
            found.append(f"{annotation_file}: image {file_name} is {real[1]}x{real[0]} but the "
                         f"file declares {width:g}x{height:g}: boxes are clipped to the declared "
                         f"size; fix the image sizes (and boxes) in the annotation file")
    return found


def _check_trainable(parsed: dict, annotation_file: Path, split: str) -> None:
    """The training split needs images and an annotations list (empty is allowed: COCO
    files list every image, annotated or not, but a file without the key is a test set)."""
    if not parsed["has_annotations"]:
        raise DatasetError(f"{annotation_file}: no 'annotations' list, so the training split "
                           f"'{split}' has no objects to learn; use an instances file with "
                           f"annotations for system.train_split")
    if not parsed["file_names"]:
        raise DatasetError(f"{annotation_file}: no images, so the training split '{split}' "
                           f"is empty; use a file that lists the training images")


def _per_image(rows: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """Split (M, D) rows into one (counts[i], D) array per image."""
    return np.split(rows, np.cumsum(counts)[:-1]) if len(counts) else []


def _cached_parse(path: Path, cache_dir: Path, log: Log) -> dict:
    """The parsed annotation file, from `cache_dir` when the file is unchanged.

    A cache file that cannot be read as one of ours (truncated, another format or version) is
    named in a warning, parsed again and replaced. A cache that cannot be written is named
    too, and the run goes on without it.
    """
    raw = path.read_bytes()
    stat = path.stat()
    key = hashlib.sha1(
        f"{_CACHE_VERSION}|{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|"
        f"{hashlib.sha1(raw).hexdigest()}".encode()).hexdigest()
    cache_file = cache_dir / f"{path.stem}-{key[:20]}.npz"
    if cache_file.is_file():
        try:
            return _read_cache(cache_file)
        except _UNREADABLE as err:
            log(f"ignoring unreadable dataset cache {cache_file} ({type(err).__name__}: "
                f"{err}); parsing {path} again")
    parsed = parse_instances(raw, path)
    try:
        if cache_dir.is_dir():
            remove_stale_temp_files(cache_dir)
        _write_cache(cache_file, parsed)
    except StorageError as err:
        log(f"cannot write the dataset cache ({err}); going on without it")
    return parsed


_META_KEYS = ("file_names", "category_ids", "category_names", "has_annotations", "problems",
              "clipped_images")
_ARRAY_KEYS = {"image_ids": (np.int64, 1), "boxes": (np.float32, 2),
               "box_counts": (np.int64, 1), "crowds": (np.float32, 2),
               "crowd_counts": (np.int64, 1)}
# What reading a damaged or foreign .npz can raise (BadZipFile is no OSError or ValueError).
_UNREADABLE = (OSError, ValueError, KeyError, EOFError, TypeError, zipfile.BadZipFile,
               zlib.error)


def _write_cache(cache_file: Path, parsed: dict) -> None:
    """Write atomically with the permissions of any new file (see write_file_atomic)."""
    meta = json.dumps({key: parsed[key] for key in _META_KEYS})
    arrays = {key: parsed[key] for key in _ARRAY_KEYS}
    write_file_atomic(cache_file, lambda file: np.savez(file, meta=np.array(meta), **arrays))


def _read_cache(cache_file: Path) -> dict:
    """A cache written by `_write_cache`; ValueError when it holds anything else."""
    with np.load(cache_file, allow_pickle=False) as arrays:
        if set(arrays.files) != {"meta", *_ARRAY_KEYS}:
            raise ValueError(f"holds {sorted(arrays.files)}")
        parsed = json.loads(str(arrays["meta"]))
        if not isinstance(parsed, dict) or set(parsed) != set(_META_KEYS):
            raise ValueError("its description is not one of ours")
        for key, (dtype, ndim) in _ARRAY_KEYS.items():
            parsed[key] = arrays[key]
            if parsed[key].dtype != dtype or parsed[key].ndim != ndim:
                raise ValueError(f"{key} is {parsed[key].dtype} with {parsed[key].ndim} axes")
    images = len(parsed["file_names"])
    if not (len(parsed["image_ids"]) == len(parsed["box_counts"]) == len(parsed["crowd_counts"])
            == images and parsed["box_counts"].sum() == len(parsed["boxes"])
            and parsed["crowd_counts"].sum() == len(parsed["crowds"])
            and parsed["boxes"].shape[1] == 5 and parsed["crowds"].shape[1] == 4):
        raise ValueError("its tables disagree in length")
    return parsed

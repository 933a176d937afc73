"""The db keys that datasets declare: each dataset class names the keys it reads beyond the
common ones (`DETECTION.db_keys`), and which of them are paths; registering the dataset
(`core.dbs.register_dataset`) declares them here. The built-in datasets' keys are written here
(`BUILTIN`, which their classes take as their `db_keys`) and declared with this module, so that
a config is checked with nothing imported before `load_config`.

What reads the declarations, with no list of its own: the config schema (a declared key is
accepted with its type and default, a misspelt one refused), the refusal of another dataset's
keys (core/dbs/coco.py names the dataset a key belongs to), the check that path keys hold paths,
and the node agreement (core/engine/agree.py: paths may differ between nodes). The config floor
sits below the datasets, so the datasets fill this module rather than the schema importing them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DbKey:
    """One db key a dataset reads: its default, its JSON types, whether it may be null, and
    whether it is a path (or a {split: path} dict), which may differ from node to node."""

    default: Any
    types: tuple[type, ...]
    nullable: bool = True
    path: bool = False

    @property
    def schema(self) -> tuple[Any, tuple[type, ...], bool]:
        """As the config schema holds a key: (default, types, nullable)."""
        return self.default, self.types, self.nullable


# COCO's split key -> image folder and split key -> annotation json (both paths); Shapes is a
# COCO; YOLO's data.yaml; VOC's devkit folder and class names.
_COCO = {"image_dirs": DbKey(None, (dict,), path=True),
         "annotation_files": DbKey(None, (dict,), path=True)}
BUILTIN: dict[str, dict[str, DbKey]] = {
    "COCO": _COCO, "Shapes": _COCO,
    "VOC": {"voc_root": DbKey(None, (str,), path=True), "names": DbKey(None, (list,))},
    "YOLO": {"data_yaml": DbKey(None, (str,), path=True)}}

# dataset name -> the db keys it reads beyond the common ones, as it declared them
DECLARED: dict[str, dict[str, DbKey]] = {name: dict(keys) for name, keys in BUILTIN.items()}


def declare(dataset: str, keys: Mapping[str, DbKey]) -> None:
    """Record `dataset`'s db keys (again: replaced). A key another dataset declared too must be
    declared alike (one key, one meaning)."""
    for key, spec in keys.items():
        for other, declared in DECLARED.items():
            if other != dataset and key in declared and declared[key] != spec:
                raise ValueError(f"dataset {dataset} declares db.{key} as {spec}, but {other} "
                                 f"declared it as {declared[key]}: one key, one meaning")
    DECLARED[dataset] = dict(keys)


def declared_keys() -> dict[str, DbKey]:
    """Every declared db key, whichever dataset declared it."""
    return {key: spec for keys in DECLARED.values() for key, spec in keys.items()}


def owners(key: str) -> list[str]:
    """The datasets that declared db key `key`, in registration order."""
    return [dataset for dataset, keys in DECLARED.items() if key in keys]


def path_keys() -> set[str]:
    """The declared db keys that are paths, as `db.<key>`."""
    return {f"db.{key}" for key, spec in declared_keys().items() if spec.path}

"""The benchmarks' dataset: a shipped config's settings over coco128 (found as `bench/_shared`
says: CORNERNET_DATA, ../shared, ./shared)."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _checkout  # noqa: F401 - the checkout's root on sys.path, before core

from core.config import load_config
from core.dbs import datasets

try:
    from bench._shared import coco128_dir, looked_in
except ImportError:  # run as a script from bench/
    from _shared import coco128_dir, looked_in

REPO = Path(__file__).resolve().parents[1]
# Where coco128 was found; a path that does not exist when it was not (scripts check is_dir()).
COCO128 = coco128_dir() or REPO / "shared" / "data" / "coco128"
MISSING = f"coco128 not found; looked in {looked_in()}: run bench/gpu_prep.sh or set CORNERNET_DATA"


def coco128_run(name: str, db: dict | None = None, **system: Any) -> tuple[Any, Callable]:
    """configs/<name>.json with `system` and `db` overrides, reading all 128 images (a scratch
    dataset cache); returns (system_config, make_db)."""
    system_config, db_config = load_config(name)
    system_config = system_config.replace(cache_dir=tempfile.mkdtemp(), **system)
    db_config.update(image_dirs={"all": str(COCO128 / "images")},
                     annotation_files={"all": str(COCO128 / "annotations" /
                                                  "instances_coco128.json")}, **(db or {}))
    make_db = functools.partial(datasets["COCO"], db_config, split="all",
                                sys_config=system_config)
    return system_config, make_db

"""The benchmarks' dataset: a shipped config's settings over ../shared/data/coco128."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any, Callable

from core.config import load_config
from core.dbs import datasets

REPO = Path(__file__).resolve().parents[1]
COCO128 = REPO.parent / "shared" / "data" / "coco128"


def coco128_run(name: str, db: dict | None = None, **system: Any) -> tuple[Any, Callable]:
    """configs/<name>.json with `system` and `db` overrides, reading all 128 images (a scratch
    dataset cache); returns (system_config, make_db)."""
    system_config, db_config = load_config(name)
    system_config.full.update(cache_dir=tempfile.mkdtemp(), **system)
    db_config.update(image_dirs={"all": str(COCO128 / "images")},
                     annotation_files={"all": str(COCO128 / "annotations" /
                                                  "instances_coco128.json")}, **(db or {}))
    make_db = functools.partial(datasets["COCO"], db_config, split="all",
                                sys_config=system_config)
    return system_config, make_db

"""Where the tests and benchmarks find coco128 and the parity references: one rule for all
(bench/_shared.py gives the benchmarks this module's functions).

In order: the folder `CORNERNET_DATA` names (gpu_check's `--data` sets it for its steps), then
`../shared` beside the repository (a developer's checkout and CI), then `./shared` inside it (what
`bench/gpu_prep.sh` fills, since only the repository travels to a GPU machine). A folder is laid
out like shared/: `data/coco128/` and `reference/`; a coco128 folder itself is taken too. The
repository carries the parity references and a 28-image subset of coco128 (tests/data/): the
tests fall back to them, the benchmarks take the full set only.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = "CORNERNET_DATA"
MARK = Path("annotations") / "instances_coco128.json"
# what travels with the repository: 28 of coco128's images with their original annotations,
# and the parity references (tests/data/README.md)
SUBSET = REPO / "tests" / "data" / "coco128-mini"
REFERENCE = REPO / "tests" / "data" / "reference"


def candidates() -> list[tuple[str, Path]]:
    """(where it came from, folder) in the order they are tried; CORNERNET_DATA, when set, is
    the only one (a wrong value is said, not passed over)."""
    named = os.environ.get(ENV)
    if named:
        return [(ENV, Path(named).expanduser())]
    return [("../shared", REPO.parent / "shared"), ("./shared", REPO / "shared")]


def coco128_dir(subset: bool = False) -> Path | None:
    """The first coco128 folder (images/, annotations/instances_coco128*.json), or None. With
    `subset` (the tests) and no CORNERNET_DATA, the repository's own 28 of its images
    (tests/data/coco128-mini, same layout and file names) when no full set is found."""
    for _, root in candidates():
        for path in (root, root / "data" / "coco128"):
            if (path / MARK).is_file():
                return path
    if subset and not os.environ.get(ENV) and (SUBSET / MARK).is_file():
        return SUBSET
    return None


def is_full(coco128: Path) -> bool:
    """Whether `coco128` is the whole set (128 images), not the repository's subset."""
    return coco128.resolve() != SUBSET.resolve()


def reference_dir() -> Path | None:
    """The first parity-reference folder (reference/README.md), or None; the repository's
    copy (tests/data/reference) last, so that one is always found in a checkout."""
    roots = [root for _, root in candidates()] + [REFERENCE.parent]
    return next((root / "reference" for root in roots
                 if (root / "reference" / "README.md").is_file()), None)


def looked_in() -> str:
    """Where the data was looked for, for a message that says what to do."""
    return ", ".join(f"{path} ({origin})" for origin, path in candidates())

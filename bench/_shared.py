"""Where the tests and benchmarks find coco128 and the parity references: one rule for all.

In order: the folder `CORNERNET_DATA` names (gpu_check's `--data` sets it for its steps), then
`../shared` beside the repository (a developer's checkout and CI), then `./shared` inside it (what
`bench/gpu_prep.sh` fills, since only the repository travels to a GPU machine). A folder is laid
out like shared/: `data/coco128/` and `reference/`; a coco128 folder itself is taken too.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = "CORNERNET_DATA"
MARK = Path("annotations") / "instances_coco128.json"


def candidates() -> list[tuple[str, Path]]:
    """(where it came from, folder) in the order they are tried; CORNERNET_DATA, when set, is
    the only one (a wrong value is said, not passed over)."""
    named = os.environ.get(ENV)
    if named:
        return [(ENV, Path(named).expanduser())]
    return [("../shared", REPO.parent / "shared"), ("./shared", REPO / "shared")]


def coco128_dir() -> Path | None:
    """The first coco128 folder (images/, annotations/instances_coco128*.json), or None."""
    for _, root in candidates():
        for path in (root, root / "data" / "coco128"):
            if (path / MARK).is_file():
                return path
    return None


def reference_dir() -> Path | None:
    """The first parity-reference folder (reference/README.md), or None."""
    return next((root / "reference" for _, root in candidates()
                 if (root / "reference" / "README.md").is_file()), None)


def looked_in() -> str:
    """Where the data was looked for, for a message that says what to do."""
    return ", ".join(f"{path} ({origin})" for origin, path in candidates())

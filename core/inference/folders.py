"""Where a snapshot's evaluation is written: results/<Cfg>/<iter>/<split>[/<suffix>].

test.py, the evaluation during training and tools/analyze_results.py all find the folder here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError


def results_folder(system_config: Any, iteration: int | str, split: str,
                   suffix: str | None = None) -> Path:
    """<system.result_dir>/<Cfg>/<iteration>/<split>[/<suffix>] of the run `system_config`;
    a UsageError when the names would lead it outside system.result_dir."""
    folder = system_config.result_dir / str(iteration) / split
    if suffix is not None:
        folder = folder / suffix
    root = system_config.resolve(system_config.full["result_dir"]).resolve()
    if not folder.resolve().is_relative_to(root):
        raise UsageError(f"results folder {folder} would lie outside system.result_dir {root}: "
                         "use plain names for the config, split and suffix")
    return folder

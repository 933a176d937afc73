"""Where this project lives: a checkout or an installed distribution, and where its configs and
data are found. The one rule; every other module asks here.

A checkout is the `core` package beside a pyproject.toml that names this project (an installed
`core` lies in site-packages, with no such file). A checkout keeps its data, cache and results
under its root and ships its configs in `configs/`, so `python train.py` reads and writes the
same folders from anywhere; an installed distribution (`pip install cornernet-lite-modern`)
reads and writes them under the working folder and ships its configs as the package data
`cornernet/configs`.
"""

from __future__ import annotations

import functools
from pathlib import Path

DISTRIBUTION = "cornernet-lite-modern"
INSTALL_ROOT = Path(__file__).resolve().parents[2]  # the checkout's root, or site-packages


@functools.cache
def is_checkout(root: Path = INSTALL_ROOT) -> bool:
    """Whether `root` is this project's checkout: a pyproject.toml that names this project
    beside the `core` package."""
    project = root / "pyproject.toml"
    if not (project.is_file() and (root / "core").is_dir()):
        return False
    try:
        text = project.read_text(encoding="utf-8")
    except OSError:
        return False
    return f'name = "{DISTRIBUTION}"' in text


CHECKOUT = is_checkout()
# Where relative data, cache and result paths resolve: the checkout, else the working folder.
PROJECT_ROOT = INSTALL_ROOT if CHECKOUT else Path.cwd()
# The shipped configs: the checkout's, or the package data of an installed `cornernet`.
CONFIG_DIR = INSTALL_ROOT / "configs" if CHECKOUT else INSTALL_ROOT / "cornernet" / "configs"

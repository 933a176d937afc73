"""What a dataset reads of the system config, as one frozen value.

`SystemConfig.dataset_settings()` makes it. The datasets (`core.dbs`) take it instead of the whole
config, so a dataset built in a prefetch worker carries six values, and a test or tool can make
one without a SystemConfig.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def resolve_path(root: Path, path: str | Path) -> Path:
    """`path` as an absolute path; a relative one is taken from `root` (the project root)."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else (root / path).resolve()


@dataclass(frozen=True)
class DatasetSettings:
    """The system values a dataset reads.

    data_dir: where the generated and default datasets live (system.data_dir, absolute).
    cache_dir: the cache root; parsed and converted labels go to `cache_dir / "dbs"`.
    train_split: the split trained on (system.train_split): it must hold trainable boxes.
    strict_images: a label problem is an error instead of a warning (system.strict_images).
    seed: the system seed; a dataset's `rng` starts from it and the split name.
    root: the folder relative paths of the db section are taken from (the project root).
    """

    data_dir: Path
    cache_dir: Path
    train_split: str
    strict_images: bool
    seed: int
    root: Path

    def resolve(self, path: str | Path) -> Path:
        """A path of the db section as an absolute path, as the system config resolves its own."""
        return resolve_path(self.root, path)

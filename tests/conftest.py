"""Shared fixtures: the real data in ../shared, and a small thread budget for CPU tests."""

from pathlib import Path

import pytest
import torch
from _slurm import slurm  # noqa: F401 - a single-node SLURM cluster, session-scoped

SHARED = Path(__file__).resolve().parents[2] / "shared"
COCO128 = SHARED / "data" / "coco128"
REFERENCE = SHARED / "reference"

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def coco128() -> Path:
    """The 128 real COCO images with their annotations; tests skip when ../shared is absent."""
    if not (COCO128 / "annotations" / "instances_coco128.json").is_file():
        pytest.skip(f"real data not found at {COCO128} (../shared beside the repository)")
    return COCO128


@pytest.fixture(scope="session")
def reference() -> Path:
    """Parity vectors from the original code; tests skip when ../shared is absent."""
    if not (REFERENCE / "README.md").is_file():
        pytest.skip(f"parity references not found at {REFERENCE} (../shared beside the repository)")
    return REFERENCE


@pytest.fixture(scope="session")
def tiny_db(coco128, tmp_path_factory):
    """The coco128 training split as CornerNet_Tiny's dataset (80 classes)."""
    from tests._dense_reference import coco128_db
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)

"""Shared fixtures: the real data (CORNERNET_DATA, ../shared or ./shared, as bench/_shared.py
finds it), and a small thread budget for CPU tests."""

import signal

import pytest
import torch
from _onnx import spread_export  # noqa: F401 - one ONNX export, session-scoped
from _slurm import slurm  # noqa: F401 - a single-node SLURM cluster, session-scoped

from bench._shared import coco128_dir, looked_in, reference_dir

COCO128 = coco128_dir()
REFERENCE = reference_dir()

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def coco128():
    """The 128 real COCO images with their annotations; tests skip when none is found."""
    if COCO128 is None:
        pytest.skip(f"real data not found; looked in {looked_in()} (set CORNERNET_DATA, or run "
                    "bench/gpu_prep.sh)")
    return COCO128


@pytest.fixture(scope="session")
def reference():
    """Parity vectors from the original code; tests skip when none are found."""
    if REFERENCE is None:
        pytest.skip(f"parity references not found; looked in {looked_in()}")
    return REFERENCE


@pytest.fixture(scope="session")
def tiny_db(coco128, tmp_path_factory):
    """The coco128 training split as CornerNet_Tiny's dataset (80 classes)."""
    from tests._dense_reference import coco128_db
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


@pytest.fixture
def restore_handlers():
    """The stop and resume signals' handlers as they were before the test (a test that makes a
    StopRequest or runs `launch` in-process installs its own)."""
    from core.engine import stop as stops
    saved = {s: signal.getsignal(s) for s in (*stops.STOPS, *stops.CANDIDATES)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)

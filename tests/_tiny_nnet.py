"""CornerNet_Tiny's NetworkFactory on the CPU and the training batches it is fed, as the
prefetcher hands them over: the pieces of the in-process step tests (precision, EMA, freezing,
casts, the CUDA lines, snapshots)."""

from __future__ import annotations

import numpy as np
import torch

from core.config import SystemConfig
from core.nnet.py_factory import NetworkFactory
from core.sample import data_sampling_func


def tiny_config(tmp_path, **system) -> SystemConfig:
    """CornerNet_Tiny, SGD at 0.01, batch 4, its snapshots under `tmp_path`."""
    return SystemConfig().update_config({
        "model": "CornerNet_Tiny", "snapshot_name": "P", "cache_dir": str(tmp_path),
        "batch_size": 4, "opt_algo": "sgd", "learning_rate": 0.01, **system})


def batch_of(db, size: int, data_aug: bool = True, seed: int = 0) -> dict[str, torch.Tensor]:
    """A training batch of the first `size` images, as the prefetcher hands it over."""
    db.set_rng(np.random.default_rng(seed))
    arrays, _ = data_sampling_func["cornernet"](tiny_config(".", batch_size=size), db, 0,
                                                data_aug=data_aug)
    return {key: torch.from_numpy(value) for key, value in arrays.items() if key != "meta"}


def factory(tmp_path, db, seed: int = 0, **system) -> NetworkFactory:
    """The factory of `tiny_config(tmp_path, **system)` on the CPU, its weights from `seed`."""
    torch.manual_seed(seed)
    return NetworkFactory(tiny_config(tmp_path, **system), db, device="cpu")

"""The shared-memory ring of the prefetcher: how many slots, how many bytes, the probe batch
whose array shapes size the slots, and the shared arrays themselves.

Each worker owns a few slots of one batch each; `ring_slots` says how many, `shm_need` how much
of /dev/shm the rings of a process take (checked before any process starts; the bytes of one
image are the sampling function's own declaration, `core.sample.image_bytes`), and `probe_batch`
builds the one batch, in the trainer, whose shapes the ring copies (it also surfaces data errors
before any worker is forked). `SharedArrays` holds the slots: numpy arrays over shared memory that
the workers fill without importing torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from multiprocessing.sharedctypes import RawArray
from typing import Any

import numpy as np

from ..sample import image_bytes
from .chunks import Deal


def ring_slots(prefetch_size: int, workers: int, stream: str) -> int:
    """Shared-memory batch slots per worker.

    Two let a worker build its next batch while its last one is copied out; with one it waits
    for every hand-over (bench/README.md). Each worker's pipeline also holds two finished
    batches outside shared memory (the one its pin thread hands over and the one in its staged
    queue), so `prefetch_size` batches ahead take ceil(prefetch_size / workers) - 2 slots.
    Validation takes one batch every val_iter iterations: two slots are always enough there.
    """
    if stream == "val":
        return 2
    return max(2, math.ceil(prefetch_size / workers) - 2)


def shm_need(db_config: dict, sampling_function: str, batch_size: int, workers: int, *,
             prefetch_size: int, validation: bool) -> int:
    """Bytes of /dev/shm the prefetch rings of one process take.

    The training ring has `workers * ring_slots(prefetch_size, workers, "train")` slots of
    one batch each, the validation ring (with `validation`: system.val_iter > 0) one worker's
    slots. `batch_size` is the process's share; the whole batch (system.batch_size) is also what
    all processes of a run on one machine take together, since their shares add up to it.
    """
    per_batch = batch_size * image_bytes(db_config, sampling_function)
    slots = workers * ring_slots(prefetch_size, workers, "train")
    if validation:
        slots += ring_slots(prefetch_size, 1, "val")
    return slots * per_batch


def probe_batch(db: Any, sample: Callable, share: Deal) -> dict:
    """One batch of this process's share (`share.local_batch` images), built here by
    `sample(db, k_ind, batch_size, data_aug=)` as a worker would build it; its arrays give the
    ring's slot shapes."""
    batch, _ = sample(db, 0, share.local_batch, data_aug=True)
    return batch


class SharedArrays:
    """Zeroed arrays of fixed shapes and dtypes in memory shared with the processes started after
    them (/dev/shm where it has room; multiprocessing's heap, whose memory lives as long as some
    process holds it, so a killed run leaves nothing there). Passed in a process's arguments, the
    child sees the same memory: `arrays()` in either is a view of it, no copy.

    Args:
        layout: key -> (shape, dtype) of each array.
    """

    def __init__(self, layout: dict[str, tuple[tuple[int, ...], np.dtype]]) -> None:
        self._layout = {key: (tuple(shape), np.dtype(dtype).str)
                        for key, (shape, dtype) in layout.items()}
        self._raw = {key: RawArray("b", max(1, math.prod(shape) * np.dtype(dtype).itemsize))
                     for key, (shape, dtype) in self._layout.items()}

    def arrays(self) -> dict[str, np.ndarray]:
        """Each array, as a numpy view of the shared memory."""
        views = {}
        for key, (shape, dtype) in self._layout.items():
            count = math.prod(shape)
            views[key] = np.frombuffer(self._raw[key], dtype=dtype, count=count).reshape(shape)
        return views

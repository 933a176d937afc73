"""The shared-memory ring of the prefetcher: how many slots, how many bytes, and the probe batch
whose array shapes size the slots.

Each worker owns a few slots of one batch each; `ring_slots` says how many, `shm_need` how much
of /dev/shm the rings of a process take (checked before any process starts; the bytes of one
image are the sampling function's own declaration, `core.sample.image_bytes`), and `probe_batch`
builds the one batch, in the trainer, whose shapes the ring copies (it also surfaces data errors
before any worker is forked).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

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

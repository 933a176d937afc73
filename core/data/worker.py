"""What a prefetch worker process runs: it builds its batches into its slots of the shared ring
(`core.data.prefetch` is the trainer's side).

This module, and all a worker imports, leave torch out: the workers come from a fork server
that imports only the data code, 0.35 s of CPU where it took 2.0 s with torch, in every
training process (and in each of its ranks). The ring is numpy arrays over shared memory
(`core.data.ring.SharedArrays`), which the trainer wraps as tensors without a copy.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import queue
import signal
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from ..utils.images import collect_decoder_warnings, take_decoder_warnings
from ..utils.procs import is_alive
from ..utils.threads import one_thread
from .chunks import Deal
from .ring import SharedArrays
from .stream import batch_rng, stream_indices

POLL_S = 0.2
SPARE = 64  # stand-in images a chunk may draw on when some of its own cannot be read


def arrays_of(batch: dict) -> dict[str, np.ndarray]:
    return {key: value for key, value in batch.items() if isinstance(value, np.ndarray)}


class _PathRecorder:
    """Wraps `db.read_image` so that a failure can name the image the worker was on."""

    def __init__(self, db: Any) -> None:
        self.path = None
        self._read = db.read_image
        self._db = db

    def __call__(self, ind: int) -> np.ndarray:
        self.path = self._db.image_path(ind)
        return self._read(ind)


def build_batches(make_db: Callable[[], Any], sample: Callable, seed: int, share: Deal,
                  data_aug: bool, stream: str, worker: int, workers: int, start: int,
                  ring: SharedArrays, slots: list[int], out_queue: mp.Queue,
                  free_queue: mp.Queue, stop: ctypes.c_bool, trainer: tuple[int, str]) -> None:
    """Build the batches n >= start with n % workers == worker, in order, until told to stop
    (`stop.value`, a flag in shared memory) or until the trainer process `trainer` (see
    `process_identity`) is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the trainer decides what Ctrl-C means
    recorder = None
    try:
        import cv2

        cv2.setNumThreads(1)
        one_thread()  # a worker computes on one core
        collect_decoder_warnings()  # the trainer says them, once per run
        db = make_db()
        recorder = _PathRecorder(db)
        db.read_image = recorder
        views = ring.arrays()
        perms, length = {}, len(db.db_inds)
        spare = min(length, SPARE)
        offsets = share.offsets
        free = list(slots)
        number = start + (worker - start) % workers  # the first n >= start with n % W == w
        while not stop.value:
            while not free:
                try:
                    free.append(free_queue.get(timeout=POLL_S))
                except queue.Empty:
                    if stop.value or not is_alive(trainer):
                        out_queue.cancel_join_thread()  # nobody reads any more
                        return
            slot = free.pop()
            meta: dict = {"skipped": [], "dropped_objects": 0}
            base, local = number * share.batch_size, 0
            # Images after the whole batch stand in for unreadable ones, whoever runs the chunk.
            spares = stream_indices(seed, base + share.batch_size, spare, length, data_aug, perms)
            for j in share.indices:
                size = share.sizes[j]
                own = stream_indices(seed, base + offsets[j], size, length, data_aug, perms)
                db.db_inds = np.concatenate([own, spares])
                db.set_rng(batch_rng(seed, stream, number, j))
                batch, _ = sample(db, 0, size, data_aug=data_aug)
                for key, value in arrays_of(batch).items():
                    views[key][slot, local:local + size] = value
                for key, value in batch.get("meta", {}).items():
                    meta[key] = meta.get(key, [] if isinstance(value, list) else 0) + value
                local += size
            meta["decoder"] = take_decoder_warnings()
            out_queue.put(("batch", number, slot, meta))
            number += workers
    except Exception:  # noqa: BLE001 - every failure must reach the trainer
        where = f" (image {recorder.path})" if recorder is not None and recorder.path else ""
        out_queue.put(("error", worker, f"{traceback.format_exc()}{where}", None))
        out_queue.close()
        out_queue.join_thread()  # the error must reach the trainer before this process ends

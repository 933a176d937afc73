"""Where the time of a test run goes: seconds added up per named stage.

A clock on a GPU costs a sync: the host waits for every queued kernel before it reads the time,
and the GPU idles until the host queues more. So the stages inside the network's call (the
network proper and the decoding) are timed apart on a GPU only when asked (`decode_clock`'s
`sync`, test.py --sync-timing); the stages around it end in a read of the detections anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


class StageTimer:
    """Adds wall-clock seconds per stage name ("read", "network", "nms", ...), from any thread
    (a stage timed in several threads at once counts each thread's seconds)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)


@contextmanager
def decode_clock(nnet: Any, timer: StageTimer, sync: bool = False) -> Iterator[None]:
    """Split the network's time into the network proper and the decoding inside its test path.

    The last corner head (br_offs of the last stack) finishes the network; the model's forward
    returns after decoding. Models without those heads, compiled networks, and networks on a
    GPU without `sync` (the split waits for the GPU after each network) are timed as "network"
    only.
    """
    model = getattr(nnet, "model", None)
    model = getattr(model, "module", model)
    heads = getattr(model, "br_offs", None)
    device = nnet.device
    if heads is None or getattr(nnet, "compiled", False) or (device.type != "cpu" and not sync):
        # A compiled network is one graph: hooks inside it would be traced, and their clock
        # would break the graph. On a GPU the clock would wait for the device on every batch.
        yield
        return

    def wait() -> None:  # the network's GPU, which need not be the current one
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    marks = threading.local()  # each of `detect`'s threads times its own forward

    def heads_done(*_: Any) -> None:
        wait()
        marks.heads = time.perf_counter()

    def forward_done(*_: Any) -> None:
        heads = getattr(marks, "heads", None)
        if heads is not None:
            marks.heads = None
            seconds = time.perf_counter() - heads
            timer.add("decode", seconds)
            timer.add("network", -seconds)

    handles = [heads[-1].register_forward_hook(heads_done),
               model.register_forward_hook(forward_done)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()

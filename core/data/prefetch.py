"""Prefetching: worker processes build batches into shared memory; pin threads stage them.

One `Prefetcher` serves one stream of batches (training or validation) for one rank:

- W worker processes, each with its own dataset object. Batch `n` is built by worker `n % W`,
  chunk by chunk (`core.data.chunks`): chunk j of global batch n holds the images at stream
  positions `n * B + offset_j ...` of an epoch permutation seeded from (seed, epoch), and draws from
  a generator seeded from (seed, stream, n, j). A batch is therefore a pure function of the seed and
  its number: exact resume is "start at batch N", no two workers or ranks ever draw the same stream,
  and neither the worker count nor the process count changes the data.
- Each worker owns K slots of a ring of shared arrays preallocated by the trainer (their
  shapes come from one probe batch built in the trainer; the trainer sees them as tensors).
  Only (n, slot, small records) go through the worker's queue; the trainer returns the slot
  through the worker's free queue. The workers' code is `core.data.worker`, free of torch.
- One pin thread per worker queue copies the slot out (into pinned memory when the batches
  go to CUDA), frees the slot and hands the tensors over in order of batch number.
- Errors travel: a worker's exception comes back with its traceback and the image it was on,
  and is raised in the trainer. Every wait has a timeout after which the workers' liveness is
  checked, so a killed worker is an error, never a hang. `close()` stops and joins everything.
- Workers watch the trainer process itself (not their parent, which is the fork server) and
  exit within a second of its death, however it died.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing as mp
import os
import queue
import signal
import sys
import sysconfig
import threading
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, RunFailure, Stopped
from ..utils.device import resolve_device
from ..utils.procs import REIMPORTED_MAIN, UnguardedMain, process_identity
from .chunks import Deal
from .ring import SharedArrays, ring_slots
from .worker import POLL_S, arrays_of, build_batches

OWN_PACKAGES = ("core", "cornernet")
STALL_S = 600.0  # a live worker that delivers nothing for this long is treated as hung


class WorkerError(RunFailure, RuntimeError):
    """A prefetch worker failed; the message carries its traceback or exit status."""

    def explain(self) -> str:
        return f"training stopped: {self}"


def _context(*code: Any) -> mp.context.BaseContext:
    """Workers come from a fork server: a clean process started once (the first Prefetcher of a
    process starts it) with the modules a worker needs and nothing else:

    - the data code, which does not import torch: the fork server starts in 0.35 s of CPU
      where it took 2.0 s with torch, once per training process (and per rank);
    - the modules that define `code` (the dataset and the sampling function a worker runs),
      which each worker would import anyway;
    - the installed packages (torch, numpy, ...) and this project's modules that the caller's
      script holds at its top level (`script_modules`): each worker runs that top level again,
      as every process started by spawn or a fork server does, and would otherwise import
      torch itself where the script does. The script's own modules are left to the workers:
      one that reads sys.argv when imported would see the fork server's. train.py holds none
      of torch.

    A plain fork copies the trainer's locks in whatever state its threads (OpenMP, OpenCV,
    the pin threads) hold them, and a worker can then hang for ever on its first call; a
    spawned worker would run the script's top level with none of this imported.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    main = sys.modules.get("__main__")
    ctx.set_forkserver_preload(["core.data.worker", "core.sample", "core.dbs", "cv2",
                                *defining_modules(*code),
                                *script_modules(*vars(main).values() if main else ())])
    return ctx


def defining_modules(*code: Any) -> list[str]:
    """The modules that define each of `code` (a function, a class, an instance of one, or a
    functools.partial of these); the caller's __main__ and builtins are left out."""
    names = []
    for item in code:
        while isinstance(item, functools.partial):
            item = item.func
        module = getattr(item, "__module__", None) or type(item).__module__
        if isinstance(module, str) and not module.startswith("__") and module != "builtins" \
                and module not in names:
            names.append(module)
    return names


def script_modules(*values: Any) -> list[str]:
    """What a script's globals `values` hold (modules, and the functions and classes imported
    from them) that is safe to import in the fork server: this project's modules, and the
    top-level packages installed with Python (site-packages, the standard library); not the
    script's own modules."""
    places = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib",
                                                      "platstdlib")}
    names = []
    for value in values:
        if isinstance(value, types.ModuleType):
            name = value.__name__
        elif isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
            name = value.__module__
        else:
            continue
        top = name.partition(".")[0] if isinstance(name, str) else "__"
        if top in OWN_PACKAGES:
            chosen = name
        else:
            where = getattr(sys.modules.get(top), "__file__", None)
            installed = where is not None and any(Path(where).is_relative_to(place)
                                                  for place in places)
            chosen = top if installed and not top.startswith("__") else None
        if chosen and chosen not in names:
            names.append(chosen)
    return names


class Prefetcher:
    """Ordered batches of one stream for one rank, built by `workers` processes.

    Args:
        make_db: picklable callable returning a fresh dataset object (run in each worker).
        sample: the sampling function, `sample(db, k_ind, batch_size, data_aug=)`
            (`core.sample.sampler`); it is called once per chunk, with the chunk's size.
        probe: one batch of this rank's size (`share.local_batch`) built by the trainer; its
            array shapes size the shared ring.
        share: this rank's chunks of every global batch (`core.data.chunks.deal`).
        seed: system.seed, from which every batch's images and draws follow.
        prefetch_size: system.prefetch_size, the batches built ahead (`ring_slots`).
        start: number of the first batch to deliver (the data position to resume from).
        device: where the batches go; on CUDA they are staged in pinned memory.
    """

    def __init__(self, make_db: Callable[[], Any], sample: Callable, probe: dict, *,
                 share: Deal, workers: int, data_aug: bool, stream: str, seed: int,
                 prefetch_size: int, start: int = 0,
                 device: torch.device | str | None = None) -> None:
        if workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {workers}")
        self.workers, self.next = workers, start
        self._device = resolve_device(device or "cpu")  # pin threads need cuda:<index>
        per_worker = ring_slots(prefetch_size, workers, stream)
        shared = SharedArrays({key: ((workers * per_worker, *value.shape), value.dtype)
                               for key, value in arrays_of(probe).items()})
        self._shared = shared  # the memory lives as long as this Prefetcher, not only its views
        self._ring = {key: torch.from_numpy(view) for key, view in shared.arrays().items()}
        ctx = _context(make_db, sample)
        # The workers' stop flag is a byte of shared memory, not an Event: an Event's lock is
        # shared with the workers, and a trainer killed while it held that lock (setting the
        # flag in close(), as a rank does when a peer dies, just before its launcher kills it)
        # left every worker blocked on it for good, its fork server and the launcher's
        # resource tracker with them.
        self._stop = ctx.RawValue(ctypes.c_bool, False)
        self._out = [ctx.Queue() for _ in range(workers)]
        self._free = [ctx.Queue() for _ in range(workers)]
        self._staged = [queue.Queue(maxsize=1) for _ in range(workers)]
        self._thread_stop = threading.Event()
        self._dead_since: dict[int, float] = {}
        trainer = process_identity(os.getpid())
        self.procs = []
        for w in range(workers):
            slots = list(range(w * per_worker, (w + 1) * per_worker))
            args = (make_db, sample, seed, share, data_aug, stream, w, workers, start,
                    shared, slots, self._out[w], self._free[w], self._stop, trainer)
            proc = ctx.Process(target=build_batches, args=args, daemon=True,
                               name=f"prefetch-{stream}-{w}")
            proc.start()
            self.procs.append(proc)
        self._threads = [threading.Thread(target=self._stage, args=(w,), daemon=True,
                                          name=f"pin-{stream}-{w}") for w in range(workers)]
        for thread in self._threads:
            thread.start()

    def _stage(self, w: int) -> None:
        """Pin thread: take a slot, copy it out, free it, hand the copy over. A failure of its
        own is handed over in place of the batch, so `get()` raises it at once."""
        try:
            self._stage_batches(w)
        except Exception:  # noqa: BLE001 - the trainer must hear of it, not wait for a batch
            self._hand_over(w, ("thread_error", None, traceback.format_exc(), None))

    def _hand_over(self, w: int, record: tuple) -> None:
        while not self._thread_stop.is_set():
            try:
                self._staged[w].put(record, timeout=POLL_S)
                return
            except queue.Full:
                continue

    def _stage_batches(self, w: int) -> None:
        pin = self._device.type == "cuda"
        if pin:
            torch.cuda.set_device(self._device)  # pinned memory belongs to the rank's device
        while not self._thread_stop.is_set():
            try:
                record = self._out[w].get(timeout=POLL_S)
            except queue.Empty:
                continue
            except (OSError, EOFError, ValueError):  # queue torn down during close()
                return
            kind, number, slot, meta = record
            if kind == "batch":
                tensors = _copy_out(self._ring, slot, pin)
                self._free[w].put(slot)
                record = (kind, number, tensors, meta)
            self._hand_over(w, record)

    def check_alive(self) -> None:
        """Raise WorkerError if a worker process died without a word (UnguardedMain if it left
        because the main script runs a command at its top level: `core.utils.procs`).

        A worker that just sent its error and ended is given a moment for the record to pass
        through its pin thread.
        """
        for w, proc in enumerate(self.procs):
            if proc.is_alive():
                continue
            if proc.exitcode == REIMPORTED_MAIN:  # it reached the caller's unguarded command
                raise UnguardedMain(f"prefetch worker {proc.name} (pid {proc.pid})")
            self._dead_since.setdefault(w, time.monotonic())
            quiet = self._staged[w].empty() and self._out[w].empty()
            if quiet and time.monotonic() - self._dead_since[w] > 1.0:
                raise WorkerError(f"prefetch worker {proc.name} (pid {proc.pid}) died with "
                                  f"{_exit_status(proc.exitcode)}")

    def get(self, should_stop: Callable[[], bool] = lambda: False) -> tuple[dict, dict]:
        """The next batch in order, as (tensors, meta). Raises WorkerError or Stopped."""
        w = self.next % self.workers
        began = time.monotonic()
        while True:
            if should_stop():
                raise Stopped()
            try:
                kind, number, payload, meta = self._staged[w].get(timeout=POLL_S)
                break
            except queue.Empty:
                self.check_alive()
                if time.monotonic() - began > STALL_S:
                    raise WorkerError(f"prefetch worker {self.procs[w].name} (pid "
                                      f"{self.procs[w].pid}) is alive but delivered no batch "
                                      f"in {STALL_S:.0f} s") from None
        if kind == "error":
            raise WorkerError(f"prefetch worker {self.procs[w].name} failed:\n{payload}")
        if kind == "thread_error":
            raise WorkerError(f"pin thread {self._threads[w].name} of the trainer failed:\n"
                              f"{payload}")
        assert number == self.next, f"batch {number} arrived when {self.next} was due"
        self.next += 1
        return payload, meta

    def close(self, at_once: bool = False) -> None:
        """Stop the workers and threads; leaves no child process behind. `at_once` (the trainer
        is failing) kills the workers instead of letting them finish their batch."""
        self._stop.value = True
        self._thread_stop.set()
        deadline = time.monotonic() + (0 if at_once else 5)
        for proc in self.procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for thread in self._threads:
            thread.join(timeout=5)
        for q in self._out + self._free:
            q.cancel_join_thread()
            q.close()

    def __enter__(self) -> Prefetcher:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(at_once=exc[0] is not None)


def _copy_out(ring: dict[str, torch.Tensor], slot: int, pin: bool) -> dict[str, torch.Tensor]:
    """Slot `slot` of the shared ring, copied into fresh (pinned, for a GPU) tensors."""
    tensors = {}
    for key, value in ring.items():
        tensors[key] = torch.empty_like(value[slot], pin_memory=pin)
        tensors[key].copy_(value[slot])
    return tensors


def _exit_status(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"

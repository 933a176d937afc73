"""The test loop: detect objects in a list of dataset images, reading ahead in a thread.

A reader thread reads (JPEG decoding) and prepares (resizing, padding, mirroring) the next
images while the main thread runs the network, the decoding and the NMS, so the device waits
for the disk only when reading is slower than everything else. Images go through the network in
fixed groups of `batch_size` consecutive images of the list (those of one canvas bucket,
core/inference/buckets.py, together in one forward), so a run and its resumption (see test.py)
batch every image alike.

`detect` is what test.py and the trainer's periodic evaluation both call; its result holds
only numpy arrays and plain types, so ranks can gather it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm import tqdm

from core.utils.images import ImageReadError
from core.utils.threads import ThreadGovernor, choose_threads, set_torch_threads
from core.utils.threads import governor as threads_governor

from .registry import Inference, inference_of
from .timing import StageTimer, decode_clock

if TYPE_CHECKING:
    from core.dbs.detection import DETECTION

    from .protocol import Network

# Prepared images waiting in the reader's queue, per image of a batch (at least 4).
READ_AHEAD_BATCHES = 2
# Batches `detect` computes at once on the CPU, at most: each holds its own activations
# (CornerNet at its test settings: 0.7 GB more per image at once), so on a machine of many
# CPUs each batch computes on several threads instead.
MOST_AT_ONCE = 4


@dataclass
class ImageResult:
    """One image of a run, as `detect` hands it to `on_image` when it is done.

    `detections` is None and `error` says why when the image could not be read.
    """

    ind: int
    image_id: int
    image: np.ndarray | None
    detections: dict[int, np.ndarray] | None
    error: str | None = None


@dataclass
class DetectionRun:
    """What `detect` found.

    Attributes:
        image_ids: every image of the run, in the order of the indices given.
        detections: {image id: {cls 1..C: (n, 5) float32 [x1, y1, x2, y2, score]}} of the
            images that could be read.
        unreadable: {image id: the reason, naming the file} of the others; they are scored
            as images without detections.
        seconds: wall-clock seconds per stage: read and prepare (in the reader thread), wait
            (the main thread waiting for the reader), network, decode, nms (added up over the
            threads of `at_once`).
        at_once: the batches computed at once (`detect`'s workers).
    """

    image_ids: list[int] = field(default_factory=list)
    detections: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)
    unreadable: dict[int, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    at_once: int = 1

    def summary(self, seconds: float, device: Any, evaluation: float) -> str:
        """One line: images per second and where the time went (`seconds` of detection on
        `device`, then `evaluation` seconds of scoring)."""
        count = len(self.image_ids)
        parts = [f"{name} {self.seconds[key]:.1f} s" for key, name in (
            ("network", "network"), ("decode", "decode"), ("nms", "NMS")) if key in self.seconds]
        if parts and self.at_once > 1:
            parts[-1] += f" (added up over {self.at_once} images at once)"
        if "wait" in self.seconds:
            parts.append(f"waiting for images {self.seconds['wait']:.1f} s")
        overlapped = [f"{name} {self.seconds[key]:.1f} s" for key, name in (
            ("read", "read"), ("prepare", "resize")) if key in self.seconds]
        return (f"{count} images in {seconds:.1f} s on {device}: "
                f"{count / max(seconds, 1e-9):.1f} images/s, "
                f"{1000 * seconds / max(count, 1):.1f} ms per image; {', '.join(parts)}; "
                f"in the reader thread {', '.join(overlapped) or 'nothing'}; "
                f"evaluation {evaluation:.1f} s")

    @classmethod
    def merge(cls, runs: Sequence[DetectionRun]) -> DetectionRun:
        """One run from several (for example one per rank); seconds are added up."""
        merged = cls()
        for run in runs:
            merged.image_ids.extend(run.image_ids)
            merged.detections.update(run.detections)
            merged.unreadable.update(run.unreadable)
            for stage, seconds in run.seconds.items():
                merged.seconds[stage] = merged.seconds.get(stage, 0.0) + seconds
            merged.at_once = max(merged.at_once, run.at_once)
        return merged


def detect(db: DETECTION, nnet: Network, system_config: Any, inds: Sequence[int], *,
           progress: bool = False, batch_size: int = 1,
           on_image: Callable[[ImageResult], None] | None = None,
           workers: int = 1, sync_timing: bool = False) -> DetectionRun:
    """Run the configured inference (`system.sampling_function`) on images `inds` of `db`.

    Args:
        db: the dataset: `read_image(ind)`, `image_id(ind)`, `configs`, `mean`, `std`.
        nnet: NetworkFactory-like in eval mode: `device`, `model`, `test(images, **kwargs)`.
        system_config: SystemConfig (`sampling_function`, `strict_images`).
        inds: dataset indices, e.g. `db.db_inds` or one rank's share of them.
        progress: show a progress bar.
        batch_size: consecutive images that go through the network together (when their
            inputs have the same size); 1 gives every image the same numbers in any run.
        on_image: called with each image's `ImageResult` as soon as it is done.
        workers: batches computed at once, each in a thread of its own on its share of
            torch's threads (`cpu_workers`); results still reach `on_image` in the order of
            `inds`. 1: the batches one after the other on torch's thread count.
        sync_timing: on a GPU, time the network and the decoding apart, waiting for the GPU
            after each batch's network (`timing.decode_clock`); without it a GPU run never
            waits for a clock, and the decoding's time is the network's.

    Returns:
        A `DetectionRun`. An unreadable image is an error with `system.strict_images`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    inference: Inference = inference_of(system_config.sampling_function)
    inds = [int(ind) for ind in inds]
    run = DetectionRun(image_ids=[db.image_id(ind) for ind in inds], at_once=max(1, workers))
    timer = StageTimer()
    reader = _Reader(db, inds, inference.prepare, timer,
                     depth=max(4, READ_AHEAD_BATCHES * batch_size))
    # On a terminal only (disable=None): redrawn into a pipe or file, a bar fills the log.
    bar = tqdm(total=len(inds), ncols=80, desc="detecting", disable=None if progress else True)

    def done(results: list[ImageResult]) -> None:
        for result in results:
            if result.detections is None:
                run.unreadable[result.image_id] = result.error
            else:
                run.detections[result.image_id] = result.detections
            if on_image is not None:
                on_image(result)
        bar.update(len(results))

    def batches() -> Iterator[list[tuple]]:
        for start in range(0, len(inds), batch_size):
            yield [reader.next(timer) for _ in inds[start:start + batch_size]]

    def compute(items: list[tuple]) -> list[ImageResult]:
        return _run_batch(db, nnet, inference, items, timer, system_config.strict_images)

    try:
        with decode_clock(nnet, timer, sync=sync_timing):
            if workers <= 1:
                for items in batches():
                    done(compute(items))
            else:
                _in_threads(batches(), compute, done, workers)
    finally:
        bar.close()
        reader.close()
    run.seconds = dict(timer.seconds)
    return run


def _in_threads(batches: Iterator[list[tuple]], compute: Callable[[list[tuple]], list],
                done: Callable[[list], None], workers: int) -> None:
    """`compute` each batch in `workers` threads, each on its share of torch's threads (one
    where the threads are no more than the workers), and hand the results to `done` in the
    batches' order (at most `workers` batches ahead of it).

    Threads of their own rather than torch's threads inside each operation: a parallel region
    waits for its slowest thread, and beside busy processes that is the one the scheduler left
    out (test.py, CornerNet_Tiny on 2 cores beside 2 busy processes: 41 ms per image with 2
    images at once, 59-64 on 1 thread, 42-74 on 2 torch threads; idle, 20 against 33 on 1
    thread; bench/README.md "Threads")."""
    threads = torch.get_num_threads()
    # A thread takes the count set last when it first computes (torch sets it per thread).
    set_torch_threads(max(1, threads // workers))
    pending: deque[Future] = deque()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="test-net")
    try:
        for items in batches:
            pending.append(pool.submit(compute, items))
            while pending and (len(pending) > workers or pending[0].done()):
                done(pending.popleft().result())
        while pending:
            done(pending.popleft().result())
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)
        set_torch_threads(threads)


def cpu_workers(nnet: Network, asked: int | None = None) -> int:
    """Batches `detect` computes at once for `nnet`: the thread count (`asked`, --threads; else
    OMP_NUM_THREADS; else the usable CPUs), at most `MOST_AT_ONCE`, when torch computes `nnet`
    eagerly on the CPU; 1 otherwise (a GPU, a compiled graph, or a runtime that fixes its own
    threads when it opens, as onnxruntime does)."""
    if not _torch_on_cpu(nnet) or getattr(nnet, "compiled", False):
        return 1
    return min(choose_threads(asked), MOST_AT_ONCE)


def cpu_governor(nnet: Network, asked: int | None = None) -> ThreadGovernor:
    """The thread governor of predict's frame loop for `nnet`: it adjusts torch's count when
    torch computes `nnet` on the CPU and the count is ours to choose (`asked`: --threads);
    otherwise it keeps the count (a GPU, or a runtime that fixes its threads when it opens, as
    onnxruntime does)."""
    if not _torch_on_cpu(nnet):
        return ThreadGovernor(torch.get_num_threads(), adjust=False)
    return threads_governor(asked, torch.get_num_threads())


def _torch_on_cpu(nnet: Network) -> bool:
    """Whether torch computes `nnet` on the CPU, on the thread count torch is set to when it
    runs (an exported runtime fixes its own count when it opens)."""
    return nnet.device.type == "cpu" and isinstance(getattr(nnet, "model", None),
                                                    torch.nn.Module)


def _run_batch(db: DETECTION, nnet: Network, inference: Inference, items: list[tuple],
               timer: StageTimer, strict: bool) -> list[ImageResult]:
    """Detections of the readable images of `items` (ind, image, prepared, error)."""
    readable = [item for item in items if item[3] is None]
    if strict and len(readable) < len(items):
        raise next(item[3] for item in items if item[3] is not None)
    found = iter(inference.run(db, nnet, [item[2] for item in readable], timer)
                 if readable else [])
    return [ImageResult(ind, db.image_id(ind), image,
                        next(found) if error is None else None,
                        None if error is None else str(error))
            for ind, image, _, error in items]


class _Failure:
    """An exception raised in the reader thread, carried to the main thread."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Reader:
    """Reads and prepares the images of `inds` in order in a daemon thread, `depth` ahead."""

    def __init__(self, db: DETECTION, inds: list[int], prepare: Callable, timer: StageTimer,
                 depth: int) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, args=(db, inds, prepare, timer),
                                        name="test-reader", daemon=True)
        self._thread.start()

    def _work(self, db: DETECTION, inds: list[int], prepare: Callable, timer: StageTimer) -> None:
        try:
            for ind in inds:
                start = time.perf_counter()
                try:
                    image, error = db.read_image(ind), None
                except ImageReadError as err:
                    image, error = None, err
                read = time.perf_counter()
                prepared = None if image is None else prepare(db, image)
                timer.add("read", read - start)
                timer.add("prepare", time.perf_counter() - read)
                if not self._put((ind, image, prepared, error)):
                    return
        except BaseException as err:  # noqa: BLE001 - re-raised in the main thread
            self._put(_Failure(err))

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def next(self, timer: StageTimer) -> tuple:
        """The next (ind, image, prepared, error); re-raises the reader's exception."""
        with timer.stage("wait"):
            item = self._queue.get()
        if isinstance(item, _Failure):
            raise item.error
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

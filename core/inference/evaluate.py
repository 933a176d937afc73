"""A snapshot's evaluation on a split: the results folder checked and locked, the detections
journalled as they are made, scored; returns an `EvaluationReport`.

`cornernet test` (and `cornernet.evaluate`) resolve the options into a dataset, a results folder
and a way to open the network, call `evaluate_split`, and print the report's summary. Everything
that can fail is checked before the network is opened and the long part starts, the cheap first:
the folder can be written and no other run holds it, the evaluator is installed, the split has
images. Two runs on one results folder would interleave their journals: one at a time (the
folder's lock). An interrupted run continues where it stopped when run again with the same
settings (journal.py); a finished run removes its journal.

The network is opened by the caller (`open_network`: the runtimes live on the floor above), so
that this module runs whatever runtime the caller chose.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..utils import lock
from ..utils.threads import threads_line, threads_note
from .coco_eval import require_backend, score

if TYPE_CHECKING:
    from .journal import Done, Journal
    from .loop import ImageResult
    from .protocol import Network

Log = Callable[[str], None]
# The network, the file it was read from and its runtime label ("torch", "onnxruntime fp16").
Opener = Callable[[], "tuple[Network, Path, str]"]

JOURNAL = "partial.jsonl"
WEIGHTS = {"ema": "the average of the weights (system.ema_decay; --raw-weights for the others)",
           "raw": "the trained weights"}
# How to write elsewhere when another run holds the folder.
ELSEWHERE = "use another --suffix or system.result_dir"


@dataclass(frozen=True)
class EvaluationReport:
    """What `evaluate_split` did.

    Attributes:
        metrics: the 12 COCO metrics written to metrics.json (with "per_class"), or None for a
            split without boxes or the backend "none".
        folder: the results folder (results/<Cfg>/<iter>/<split>[/<suffix>]).
        results: the COCO results file written in it.
        images: the images evaluated; `resumed` of them were read from an interrupted run's
            journal, `unreadable` could not be read (each a miss).
        weights: "ema" (the weight average) or "raw".
        model_file: the snapshot or exported file the network was read from.
        summary: one line: images per second and where the time went.
    """

    metrics: dict[str, Any] | None
    folder: Path
    results: Path
    images: int
    resumed: int
    unreadable: int
    weights: str
    model_file: Path
    summary: str


def check_writable(folder: Path) -> None:
    """Create `folder` and a probe file in it, or say in one line why that is impossible."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{time.time_ns()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"cannot write results to {folder}: {err.strerror or err}; make it "
                         "writable or set system.result_dir") from None


def evaluate_split(db: Any, system_config: Any, folder: Path, split: str,
                   open_network: Opener, *, images: int | None, batch_size: int | None,
                   vis: int, vis_thresh: float, backend: str, resume: bool, sync_timing: bool,
                   threads: int | None, results_name: str, log: Log) -> EvaluationReport:
    """Detect on the first `images` (None: all) of `db`'s split `split` with the network
    `open_network` gives, `batch_size` images per call (None: system.test_batch_size),
    continuing the journal of an interrupted run of the same settings when `resume`; draw the
    first `vis` with detections above `vis_thresh` into <folder>/vis; write `results_name`
    and, unless the split has no boxes or `backend` is "none", metrics.json.

    `folder` is created and locked for the run; the journal is removed once the results are
    written. `threads`: --threads (None: OMP_NUM_THREADS, else the usable CPUs).
    """
    check_writable(folder)
    held = lock.acquire(folder, log, ELSEWHERE)
    try:
        return _evaluate(db, system_config, folder, split, open_network, images=images,
                         batch_size=batch_size or system_config.test_batch_size, vis=vis,
                         vis_thresh=vis_thresh, backend=backend, resume=resume,
                         sync_timing=sync_timing, threads=threads, results_name=results_name,
                         log=log)
    finally:
        lock.release(held)


def _evaluate(db: Any, system_config: Any, folder: Path, split: str, open_network: Opener, *,
              images: int | None, batch_size: int, vis: int, vis_thresh: float, backend: str,
              resume: bool, sync_timing: bool, threads: int | None, results_name: str,
              log: Log) -> EvaluationReport:
    import torch

    from .loop import cpu_workers, detect
    from .pictures import Pictures

    if db.has_annotations and backend != "none":
        require_backend(backend)
    inds = [int(ind) for ind in db.db_inds[:images]]
    if not inds:
        raise UsageError(f"split '{split}' has no images ({db.annotation_file})")
    image_ids = [db.image_id(ind) for ind in inds]
    nnet, model_file, label = open_network()
    log(f"loading {model_file} ({label}); {threads_line(torch.get_num_threads())}")
    if note := threads_note(threads):
        log(f"note: {note}")
    log(f"weights: {WEIGHTS[nnet.evaluated_weights]}")
    journal, done = _journal(db, system_config, folder, split, nnet, model_file, label,
                             image_ids, batch_size, resume, log)
    pictures = Pictures(db, inds[:vis], folder / "vis", vis_thresh)

    def record(result: ImageResult) -> None:
        journal.record(result)
        pictures.on_result(result)

    workers = cpu_workers(nnet, threads)
    if workers > 1:
        each = max(1, torch.get_num_threads() // workers)
        log(f"{workers} images at once, each on {each} thread{'s' if each > 1 else ''} "
            "(--threads sets how many)")
    start = time.perf_counter()
    run = detect(db, nnet, system_config, inds[done.restart_at(image_ids, batch_size):],
                 progress=True, batch_size=batch_size, on_image=record, workers=workers,
                 sync_timing=sync_timing)
    seconds = time.perf_counter() - start
    pictures.from_journal(done, set(run.image_ids), log)
    journal.close()
    detections, unreadable = done.with_run(run)

    start = time.perf_counter()
    metrics = score(db, detections, folder, backend, image_ids=image_ids,
                    unreadable=unreadable, results_name=results_name,
                    weights=nnet.evaluated_weights, class_table=True, log=log)
    summary = run.summary(seconds, nnet.device, time.perf_counter() - start)
    journal.remove()
    return EvaluationReport(metrics=metrics, folder=folder, results=folder / results_name,
                            images=len(image_ids),
                            resumed=len(image_ids) - len(run.image_ids),
                            unreadable=len(unreadable), weights=nnet.evaluated_weights,
                            model_file=model_file, summary=summary)


def _journal(db: Any, system_config: Any, folder: Path, split: str, nnet: Network,
             model_file: Path, label: str, image_ids: Sequence[int], batch_size: int,
             resume: bool, log: Log) -> tuple[Journal, Done]:
    """The journal of these settings, and what it already holds. Its fingerprint is everything
    that changes the detections: a journal of another precision or device is not resumed."""
    import torch

    from .journal import Journal, snapshot_identity

    fingerprint = {"config": {"system": system_config.full, "db": db.configs},
                   "snapshot": snapshot_identity(model_file), "runtime": label,
                   "split": split, "images": list(image_ids), "batch_size": batch_size,
                   "device": str(nnet.device), "torch": torch.__version__,
                   "weights": nnet.evaluated_weights}
    journal, done, note = Journal.open(folder / JOURNAL, fingerprint, db.num_classes, resume)
    if note:
        log(note)
    return journal, done

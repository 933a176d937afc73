"""Metrics of a training run: values are put once per iteration and written by writers.

The loop puts values (loss terms, learning rate, throughput, validation AP, ...) as they are
made; at the end of the iteration `Metrics.write` hands whatever was put to every writer: a JSON
lines file (`metrics.jsonl`, one object a line with its `iteration`), TensorBoard event files
when the `tensorboard` extra is installed, the progress bar, and the MLflow and W&B trackers
asked for (trackers.py). Only rank 0 writes.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TextIO

from tqdm import tqdm

from ..utils import hints


class Writer(Protocol):
    def write(self, iteration: int, values: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def _number(value: Any) -> Any:
    """Plain python numbers for JSON (tensors and numpy scalars become floats)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN; "nan" / "inf" stay readable
    return value


def read_lines(path: Path, say: Callable[[str], None] | None = None) -> list[dict]:
    """The records of a metrics file, in file order; [] when there is no file.

    A line that is not a JSON object with an integer "iteration" (cut by a crash, or damaged:
    a stray byte, a hand edit) is left out, and `say` is told once how many and where the
    first is. A last line without its newline is still being written and is left out quietly.
    """
    if not path.is_file():
        return []
    chunks = path.read_bytes().split(b"\n")
    lines, bad = [], []
    for number, chunk in enumerate(chunks, start=1):
        if not chunk.strip():
            continue
        try:
            line = json.loads(chunk.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            line = None
        if isinstance(line, dict) and _is_int(line.get("iteration")):
            lines.append(line)
        elif number < len(chunks):
            bad.append(number)
    if bad and say is not None:
        say(f"{path}: left out {len(bad)} damaged line{'s' if len(bad) > 1 else ''} (the "
            f"first is line {bad[0]})")
    return lines


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class JsonlWriter:
    """`metrics.jsonl`: continues the file of the run being resumed.

    Lines of iterations after `start` (written after the snapshot being resumed from, by a run
    that then died) are dropped first, so every iteration appears once whatever the history.
    """

    def __init__(self, path: Path, start: int, say: Callable[[str], None] | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = [line for line in read_lines(path, say) if line["iteration"] <= start]
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(json.dumps(line) + "\n" for line in kept))
        os.replace(tmp, path)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, iteration: int, values: dict[str, Any]) -> None:
        line = {"iteration": iteration, **{k: _number(v) for k, v in values.items()}}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardWriter:
    """Scalars under `folder` for TensorBoard; events after `start` are purged on resume."""

    def __init__(self, folder: Path, start: int) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` extra
        self._writer = SummaryWriter(log_dir=str(folder), purge_step=start + 1)

    def write(self, iteration: int, values: dict[str, Any]) -> None:
        for key, value in values.items():
            value = _number(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._writer.add_scalar(key, value, iteration)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class BarWriter:
    """The tqdm bar's postfix: loss, lr, images/s and data wait (tqdm adds the ETA)."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    def write(self, iteration: int, values: dict[str, Any]) -> None:
        shown = {"loss": "{:.4f}", "lr": "{:.2e}", "images_per_s": "{:.1f}",
                 "data_wait": "{:.0%}", "AP": "{:.3f}"}
        names = {"images_per_s": "img/s", "data_wait": "wait"}
        postfix = {names.get(k, k): fmt.format(_number(values[k]))
                   for k, fmt in shown.items() if k in values}
        if postfix:
            self.bar.set_postfix(postfix, refresh=False)

    def close(self) -> None:
        pass


def tensorboard_writer(folder: Path, start: int, log: Callable[[str], None],
                       asked: bool = True) -> Writer | None:
    """A TensorBoardWriter, or None without a working `tensorboard` package: missing, or
    installed but failing on import (a protobuf or numpy it does not fit); the run goes on with
    its other writers. TensorBoard is an extra: its absence is said (one line) only where it was
    `asked` for (system.trackers naming it); a broken install is always said."""
    try:
        return TensorBoardWriter(folder, start)
    except Exception as err:  # noqa: BLE001 - a broken install raises anything on import
        if isinstance(err, ModuleNotFoundError) and not asked:
            return None
        first = (str(err).strip().splitlines() or [""])[0]
        log(f"TensorBoard is off ({type(err).__name__}: {first}); the metrics still go to "
            f"metrics.jsonl; {hints.install('tensorboard')} to get event files in {folder}")
        return None


class Metrics:
    """Values put during an iteration, written by every writer at its end."""

    def __init__(self, writers: list[Writer]) -> None:
        self.writers = writers
        self.pending: dict[str, Any] = {}

    def put(self, **values: Any) -> None:
        self.pending.update(values)

    def write(self, iteration: int) -> None:
        """Hand what was put in this iteration to the writers (nothing put: nothing written)."""
        if self.pending:
            for writer in self.writers:
                writer.write(iteration, self.pending)
        self.pending = {}

    def artifacts(self, paths: list[Path]) -> None:
        """Hand files (the report pictures) to the writers that keep files (the trackers)."""
        for writer in self.writers:
            if hasattr(writer, "artifacts"):
                writer.artifacts(paths)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


def open_metrics(folder: Path, start: int, bar: Any, log: Callable[[str], None],
                 enabled: bool, trackers: list[Writer] = (), tensorboard: bool = False,
                 events: bool = True) -> Metrics:
    """The writers of a run whose files live in `folder` (rank 0: `enabled`; other ranks write
    nothing), and the experiment `trackers` (trackers.py) opened for it. TensorBoard's events
    are written whenever it is installed, unless `events` is false (system.tensorboard);
    `tensorboard`: it was asked for, so that its absence is said."""
    if not enabled:
        return Metrics([])
    writers: list[Writer] = [JsonlWriter(folder / "metrics.jsonl", start, log), BarWriter(bar),
                             *trackers]
    board = tensorboard_writer(folder / "tb", start, log, asked=tensorboard) if events else None
    if board is not None:
        writers.append(board)
    return Metrics(writers)


class Throughput:
    """Images/s and the share of wall time spent waiting for data, since the last `read`;
    `before`: the wall seconds of the runs this one resumes, so that `elapsed` continues them.
    Its state (`state_dict`) is {"elapsed": wall seconds of the whole run so far}."""

    def __init__(self, before: float = 0.0) -> None:
        self.before = before
        self._since = time.perf_counter()
        self._images = 0
        self._waited = 0.0
        self.total_waited = 0.0
        self.began = self._since

    def add(self, images: int, waited: float) -> None:
        self._images += images
        self._waited += waited
        self.total_waited += waited

    def read(self) -> dict[str, float]:
        """{"images_per_s", "data_wait"} over the window since the last read; starts a new one."""
        now = time.perf_counter()
        span = max(now - self._since, 1e-9)
        values = {"images_per_s": self._images / span, "data_wait": self._waited / span}
        self._since, self._images, self._waited = now, 0, 0.0
        return values

    def elapsed(self) -> float:
        """Wall seconds of the whole run: the resumed runs' and this one's."""
        return self.before + time.perf_counter() - self.began

    def state_dict(self) -> dict[str, float]:
        return {"elapsed": self.elapsed()}

    def load_state_dict(self, state: dict) -> None:
        """Continue the clock of a resumed run: `elapsed` counts on from its seconds."""
        self.before = float(state.get("elapsed", 0.0))

    def overall_wait(self) -> float:
        """The share of all wall time so far spent waiting for data."""
        return self.total_waited / max(time.perf_counter() - self.began, 1e-9)


class DataCounts:
    """Images skipped as unreadable and objects dropped beyond max_objects, so far (the runs
    resumed included); `values()` is also its state."""

    def __init__(self, log: Callable[[str], None], before: dict | None = None) -> None:
        self.log = log
        self._said_dropped = False
        self.load_state_dict(before or {})

    def add(self, meta: dict) -> None:
        """Count a batch's meta; say each skipped image, each image's decoder warnings once,
        and the first dropped objects."""
        # here, not at the top: cv2 comes with it, and `cornernet plot` reads metrics without it
        from ..utils.images import say_decoder_warnings

        say_decoder_warnings(meta.get("decoder", []), self.log)
        for path in meta.get("skipped", []):
            self.log(f"skipped unreadable image {path}")
        self.skipped_images += len(meta.get("skipped", []))
        dropped = meta.get("dropped_objects", 0)
        if dropped and not self._said_dropped:
            self.log(f"{dropped} objects beyond db.max_objects were left out of a batch; the "
                     f"extras are dropped (said once; the metrics count them as dropped_objects)")
            self._said_dropped = True
        self.dropped_objects += dropped

    def values(self) -> dict[str, int]:
        return {"skipped_images": self.skipped_images, "dropped_objects": self.dropped_objects}

    def state_dict(self) -> dict[str, int]:
        return self.values()

    def load_state_dict(self, state: dict) -> None:
        """The counts of the run resumed (keys it lacks count from 0; others are not ours)."""
        self.skipped_images = int(state.get("skipped_images", 0))
        self.dropped_objects = int(state.get("dropped_objects", 0))


# The COCO numbers an evaluation during training puts into the metrics.
EVAL_KEYS = ("AP", "AP50", "AP75", "APs", "APm", "APl")


def training_values(loss: Any, terms: dict, lr: float, grad_norm: Any, device: Any,
                    speed: Throughput, counts: DataCounts, skipped_steps: int) -> dict[str, Any]:
    """What a display iteration puts: loss and its terms (their names under "terms"), learning
    rate, gradient norm, throughput and data wait since the last display, data counts, skipped
    steps, wall seconds since the run began (across resumes) and, on CUDA, the peak GPU memory
    in GiB since the last display (the peak is reset here)."""
    values = {"loss": float(loss), **{k: float(v) for k, v in terms.items()},
              "terms": list(terms), "lr": lr,
              "grad_norm": float(grad_norm) if grad_norm is not None else None,
              **speed.read(), **counts.values(), "skipped_steps": skipped_steps,
              "time": speed.elapsed()}
    if getattr(device, "type", None) == "cuda":
        import torch  # here: reading a metrics file (tools/plot_metrics.py) needs no torch

        values["gpu_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2 ** 30
        torch.cuda.reset_peak_memory_stats(device)
    return values


def progress_bar(iterations: range, shown: bool, stream: TextIO | None = None) -> tqdm:
    """The loop's progress bar over `iterations`, drawn only when `shown` (rank 0) and `stream`
    (default: stdout) is a terminal: redrawn into a pipe or a file it fills the log with
    copies of itself, and there the display lines (`Progress`) say how far the run is."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    on_terminal = bool(isatty and isatty())
    return tqdm(iterations, disable=not (shown and on_terminal), dynamic_ncols=True, file=stream)


class Progress:
    """How far the loop is, said at the end of each display line when no bar is drawn:
    "; 300/1500 (20%), about 4 min left" (the time left from the pace since `start`)."""

    def __init__(self, start: int, end: int, bar_drawn: bool,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.start, self.end, self.bar_drawn, self.clock = start, end, bar_drawn, clock
        self.began = clock()

    def note(self, iteration: int) -> str:
        if self.bar_drawn:
            return ""  # the bar shows it
        done = max(iteration - self.start, 1)
        left = (self.clock() - self.began) / done * max(self.end - iteration, 0)
        when = f"{left / 60:.0f} min" if left >= 90 else f"{left:.0f} s"
        return (f"; {iteration}/{self.end} ({iteration / max(self.end, 1):.0%}), "
                f"about {when} left")


def display_line(iteration: int, values: dict[str, Any]) -> str:
    """The log line of a display iteration (the loss at full precision: resume is exact)."""
    terms = ", ".join(f"{k} {values[k]:.4f}" for k in values["terms"])
    return (f"iteration {iteration}: loss {values['loss']:.8g} ({terms}), lr {values['lr']:.3g}, "
            f"grad norm {values['grad_norm']:.3g}, {values['images_per_s']:.1f} images/s, "
            f"waiting for data {values['data_wait']:.1%}")

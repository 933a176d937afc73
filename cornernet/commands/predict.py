"""`cornernet predict` (demo.py): detect objects in pictures, folders, globs, videos, cameras and
streams, and draw them.

cornernet predict <Cfg> --testiter N|best --images a.jpg folder/ 'shots/*.png' clip.mp4 --out DIR
cornernet predict --snapshot cache/nnet/<Cfg>/<Cfg>_best.pkl --images 0 --out DIR   (camera 0)
cornernet predict --runtime onnxruntime --onnx model.onnx --images rtsp://... --out DIR

Writes into DIR (without --out: runs/predict, runs/predict2, ..., a new folder each run):
<name>.jpg for every readable picture and <name>.mp4 for every video, camera or stream (same frame
rate and size), with boxes, class names and scores above --thresh, and detections.jsonl with one
JSON line per picture or frame (`cornernet.Result.to_json`). An --out holding an earlier run's
outputs is refused unless --exist-ok; no file is ever written over, and two inputs never share an
output: x.jpg and x.png become x_jpg.jpg and x_png.jpg (cornernet/outputs.py). Sources are read
one at a time: one that cannot be read is named in the summary and the others are drawn; the run
fails only when none was readable. Ctrl-C finishes the current frame and closes the outputs, so
that the videos play.

The command is the API's call: `Detector.predict(sources, save_to=DIR)` detects and writes
(cornernet/outputs.py); the command opens the detector, shows progress and prints the summary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from core.config import DEFAULT_SNAPSHOT, snapshot_arg
from core.config.options import ConfigOptions, DebugOptions, DeviceOptions, SnapshotOptions
from core.config.rules import unit_interval
from core.deploy.options import RuntimeOptions
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.engine.stop import StopRequest
from core.errors import Stopped, UsageError
from core.utils.files import StorageError, probe_writable
from core.utils.options import MISSING, option
from core.utils.threads import threads_note
from cornernet.defaults import DEFAULT_THRESH
from cornernet.options import parse

# The detector (torch) and the readers and writers of pictures and videos (cv2) are imported
# by the functions that use them, so that --help imports neither (cornernet/commands/__init__.py).
if TYPE_CHECKING:
    from cornernet.detector import Detector
    from cornernet.outputs import SavedPredictions

PROG = "cornernet predict"
DESCRIPTION = "Draw the detections of a snapshot"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PredictOptions(RuntimeOptions, DebugOptions, DeviceOptions, SnapshotOptions,
                     ConfigOptions):
    """What `cornernet predict` detects in, with which detector, and where it writes."""

    cfg_file: str | None = option(None, help="config name in configs/, e.g. CornerNet_Squeeze "
                                             "(not needed with --snapshot, or with --onnx of "
                                             "an exported file)")
    testiter: int | str | None = option(None, "--testiter", parse=snapshot_arg,
                                        help=f"snapshot iteration or 'best' "
                                             f"({DEFAULT_SNAPSHOT})")
    snapshot: Path | None = option(None, "--snapshot", parse=Path, metavar="FILE",
                                   help="a snapshot file alone (it records its config; a "
                                        "config named beside it must be the one it was "
                                        "trained with)")
    images: tuple[str, ...] = option(MISSING, "--images", "--source", nargs="+",
                                     help="pictures, folders, globs, videos, camera indices "
                                          "(0) or stream URLs (rtsp://, http://)")
    out: Path | None = option(None, "--out", parse=Path,
                              help="folder for the outputs (default: runs/predict, "
                                   "runs/predict2, ... the first that is new)")
    exist_ok: bool = option(False, "--exist-ok",
                            help="add to an --out folder that holds an earlier run's outputs "
                                 "(new names: nothing in it is written over)")
    thresh: float = option(DEFAULT_THRESH, "--thresh", parse=unit_interval,
                           help=f"keep boxes scoring above it (default {DEFAULT_THRESH})")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cfg_file is None and self.snapshot is None and self.onnx is None:
            raise UsageError("name a config, or a file alone with --snapshot or --onnx")


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> PredictOptions:
    """The command line read into `PredictOptions` (a usage error exits 2)."""
    return parse(PredictOptions, argv, prog or PROG, DESCRIPTION)


def open_detector(options: PredictOptions, log: Callable[[str], None] = print) -> Detector:
    """The detector the options name: a snapshot file, an .onnx file, or a config."""
    from cornernet.detector import open_detector as open_detector_of

    detector = open_detector_of(options.cfg_file, options.snapshot, options.onnx,
                                options.testiter, options.runtime, options.precision,
                                options.device, options.config_dir, options.overrides,
                                options.thresh, options.threads, log)
    if note := threads_note(options.threads):
        log(f"note: {note}")
    return detector


@keeps_process
def run(options: PredictOptions, log: Callable[[str], None] = print) -> list[Path]:
    """Detect and draw as the options say (`Detector.predict(save_to=)`, the API's own way);
    returns the pictures and videos written."""
    from core.inference.loop import cpu_governor  # torch: not for --help
    from cornernet.outputs import run_folder
    from cornernet.sources import expand

    sources = expand(options.images)
    out = run_folder(options.out, options.exist_ok)
    try:  # an unwritable --out is found now, not after the first image
        probe_writable(out, "--out")
    except StorageError as err:
        raise UsageError(str(err)) from None
    detector = open_detector(options, log)
    log("weights: " + ("the average (system.ema_decay)"
                         if detector.network.evaluated_weights == "ema" else "the trained ones"))
    # Ctrl-C or SIGTERM: stop after the current frame, so that the outputs close and play.
    stop = StopRequest()
    # On a terminal only (disable=None): a log or a pipe gets the summary line, not the bar.
    bar = tqdm(unit="frame", desc="detecting", dynamic_ncols=True, disable=None)
    governor = cpu_governor(detector.network, options.threads)
    start = time.perf_counter()
    try:
        with contextlib.closing(detector.predict(sources, save_to=out, log=tqdm.write)) as found:
            for _ in found:
                bar.update()
                governor.tick()  # the count for the next frame
                if stop():
                    break
    finally:
        bar.close()
    saved: SavedPredictions = detector.saved
    log(summary(saved, len(sources), time.perf_counter() - start, governor.summary()))
    if stop():
        raise Stopped(stop.signum)
    if not saved.files:
        raise UsageError(f"none of the {len(sources)} inputs is a readable image")
    return list(saved.files)


def summary(saved: SavedPredictions, inputs: int, seconds: float, threads: str) -> str:
    """The run in one line: what was drawn where, how fast, what could not be read."""
    return (f"drew {len(saved.files)} of {inputs} inputs in {saved.folder}; {saved.frames} "
            f"lines in {saved.json_lines}; {saved.frames / max(seconds, 1e-9):.1f} frames/s"
            + (f"; unreadable: {', '.join(saved.unreadable)}" if saved.unreadable else "")
            + (f"; {threads}" if threads else ""))


ON_STOP = "the outputs so far are closed and complete"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), on_stop=lambda _: ON_STOP, argv=argv)


if __name__ == "__main__":
    sys.exit(main())

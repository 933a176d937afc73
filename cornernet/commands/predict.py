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
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from core.config import CONFIG_DIR, DEFAULT_SNAPSHOT, add_set_arg, snapshot_arg
from core.config.rules import unit_interval
from core.deploy.options import RuntimeOptions
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.engine.stop import StopRequest
from core.errors import Stopped, UsageError
from core.utils.files import StorageError, probe_writable
from core.utils.threads import threads_note
from cornernet.defaults import DEFAULT_THRESH
from cornernet.options import parser_for

# The detector (torch) and the readers and writers of pictures and videos (cv2) are imported
# by the functions that use them, so that --help imports neither (cornernet/commands/__init__.py).
if TYPE_CHECKING:
    from cornernet.detector import Detector

PROG = "cornernet predict"


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog or PROG,
                                     description="Draw the detections of a snapshot")
    parser.add_argument("cfg_file", nargs="?", default=None,
                        help="config name in configs/, e.g. CornerNet_Squeeze (not needed with "
                             "--snapshot, or with --onnx of an exported file)")
    parser.add_argument("--testiter", type=snapshot_arg, default=None,
                        help=f"snapshot iteration or 'best' ({DEFAULT_SNAPSHOT})")
    parser.add_argument("--snapshot", type=Path, default=None, metavar="FILE",
                        help="a snapshot file alone (it records its config; a config named "
                             "beside it must be the one it was trained with)")
    parser.add_argument("--images", "--source", dest="images", nargs="+", required=True,
                        help="pictures, folders, globs, videos, camera indices (0) or stream "
                             "URLs (rtsp://, http://)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the outputs (default: runs/predict, runs/predict2, ... "
                             "the first that is new)")
    parser.add_argument("--exist-ok", action="store_true",
                        help="add to an --out folder that holds an earlier run's outputs "
                             "(new names: nothing in it is written over)")
    parser.add_argument("--thresh", type=unit_interval, default=DEFAULT_THRESH,
                        help=f"keep boxes scoring above it (default {DEFAULT_THRESH})")
    parser.add_argument("--device", default=None,
                        help="cuda, cuda:1 or cpu (default: the current GPU, else cpu)")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    add_set_arg(parser)
    parser_for(RuntimeOptions, parser.prog, parser=parser)  # --runtime, --onnx, ...
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = parser.parse_args(argv)
    if args.cfg_file is None and args.snapshot is None and args.onnx is None:
        parser.error("name a config, or a file alone with --snapshot or --onnx")
    return args


def open_detector(args: argparse.Namespace, log: Callable[[str], None] = print) -> Detector:
    """The detector the arguments name: a snapshot file, an .onnx file, or a config."""
    from cornernet.detector import open_detector as open_detector_of

    detector = open_detector_of(args.cfg_file, args.snapshot, args.onnx, args.testiter,
                                args.runtime, args.precision, args.device, args.config_dir,
                                args.overrides, args.thresh, args.threads, log)
    if note := threads_note(args.threads):
        log(f"note: {note}")
    return detector


@keeps_process
def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> list[Path]:
    """Detect and draw as the options say; returns the pictures and videos written."""
    import cv2

    from cornernet.outputs import Outputs, run_folder
    from cornernet.sources import expand as expand_sources
    from cornernet.sources import frames

    sources = expand_sources(args.images)
    args.out = run_folder(args.out, args.exist_ok)
    try:  # an unwritable --out is found now, not after the first image
        probe_writable(args.out, "--out")
    except StorageError as err:
        raise UsageError(str(err)) from None
    detector = open_detector(args, log)
    log("weights: " + ("the average (system.ema_decay)"
                         if detector.network.evaluated_weights == "ema" else "the trained ones"))
    # Ctrl-C or SIGTERM: stop after the current frame, so that the outputs close and play.
    outputs, stop = Outputs(args.out, sources), StopRequest()
    written, bad, count = [], [], 0
    # On a terminal only (disable=None): a log or a pipe gets the summary line, not the bar.
    bar = tqdm(unit="frame", desc="detecting", dynamic_ncols=True, disable=None)
    from core.inference.loop import cpu_governor  # torch: not for --help

    governor = cpu_governor(detector.network, args.threads)
    start = time.perf_counter()
    try:
        for source in sources:
            before = count
            for frame in frames(source):
                if frame.image is None:
                    tqdm.write(f"skipped: {frame.error}")
                    bad.append(frame.source)
                    continue
                governor.tick()
                result = detector.detect(frame.image, frame.source, frame.index)
                outputs.json.write(result.to_json() + "\n")
                drawn = result.draw()
                if frame.video is not None:
                    outputs.video(frame.source, frame.video.fps, frame.video.size).write(drawn)
                else:
                    path = outputs.paths[frame.source]
                    if not cv2.imwrite(str(path), drawn):
                        raise StorageError(f"could not write {path}")
                    tqdm.write(f"{frame.source}: {len(result)} detections above "
                               f"{args.thresh} -> {path}")
                    written.append(path)
                count += 1
                bar.update()
                if stop():
                    break
            video = outputs.end_video()
            if video is not None:
                tqdm.write(f"{source}: {count - before} frames -> {video}")
                written.append(video)
            if stop():
                break
    finally:
        bar.close()
        outputs.close(written)
    seconds = time.perf_counter() - start
    threads = governor.summary()
    log(f"drew {len(written)} of {len(sources)} inputs in {args.out}; {count} lines in "
          f"{outputs.json_path}; {count / max(seconds, 1e-9):.1f} frames/s"
          + (f"; unreadable: {', '.join(bad)}" if bad else "")
          + (f"; {threads}" if threads else ""))
    if stop():
        raise Stopped(stop.signum)
    if not written:
        raise UsageError(f"none of the {len(sources)} inputs is a readable image")
    return written


ON_STOP = "the outputs so far are closed and complete"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), on_stop=lambda _: ON_STOP, argv=argv)


if __name__ == "__main__":
    sys.exit(main())

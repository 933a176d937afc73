#!/usr/bin/env python3
"""Detect objects in pictures, folders, globs, videos, cameras and streams, and draw them.

python demo.py <Cfg> --testiter N|best --images a.jpg folder/ 'shots/*.png' clip.mp4 --out DIR
python demo.py --snapshot cache/nnet/<Cfg>/<Cfg>_best.pkl --images 0 --out DIR      (camera 0)
python demo.py --runtime onnxruntime --onnx model.onnx --images rtsp://... --out DIR

Writes into DIR: <name>.jpg for every readable picture and <name>.mp4 for every video, camera or
stream (same frame rate and size), with boxes, class names and scores above --thresh, and
detections.jsonl with one JSON line per picture or frame (`cornernet.Result.to_json`). Inputs are
never written over, and two inputs never share an output: x.jpg and x.png become x_jpg.jpg and
x_png.jpg. Ctrl-C finishes the current frame and closes the outputs, so that the videos play.
"""

from __future__ import annotations

from core.utils.threads import before_torch

if __name__ == "__main__":  # first: OpenMP threads sleep while they wait (core/utils/threads.py)
    before_torch()

import argparse
import time
from collections import Counter
from pathlib import Path
from typing import Any

import cv2
from tqdm import tqdm

from core.config import CONFIG_DIR, add_set_arg, load_config, snapshot_arg
from core.config.rules import unit_interval
from core.dbs.detection import DETECTION
from core.engine.cli import run_cli
from core.engine.stop import StopRequest
from core.errors import Stopped, UsageError
from core.inference.runtimes import add_runtime_args, open_network
from core.nnet.checkpoint import require_snapshot
from core.utils.files import StorageError, probe_writable
from cornernet.detector import Detector, class_table
from cornernet.sources import expand as expand_sources
from cornernet.sources import frames, is_video

JSON_LINES = "detections.jsonl"
# In --out: the names of the files demo.py wrote there, so that a folder that is both input and
# output is never drawn on again.
DRAWN = ".demo-drawn"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Draw the detections of a snapshot")
    parser.add_argument("cfg_file", nargs="?", default=None,
                        help="config name in configs/, e.g. CornerNet_Squeeze (not needed with "
                             "--snapshot, or with --onnx of an exported file)")
    parser.add_argument("--testiter", type=snapshot_arg, default=None,
                        help="snapshot iteration or 'best' (default: system.max_iter)")
    parser.add_argument("--snapshot", type=Path, default=None, metavar="FILE",
                        help="a snapshot file alone (it records its config)")
    parser.add_argument("--images", "--source", dest="images", nargs="+", required=True,
                        help="pictures, folders, globs, videos, camera indices (0) or stream "
                             "URLs (rtsp://, http://)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the outputs")
    parser.add_argument("--thresh", type=unit_interval, default=0.5,
                        help="keep boxes scoring above it")
    parser.add_argument("--device", default=None,
                        help="cuda, cuda:1 or cpu (default: the current GPU, else cpu)")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    add_set_arg(parser)
    add_runtime_args(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = parser.parse_args(argv)
    if args.cfg_file is None and args.snapshot is None and args.onnx is None:
        parser.error("name a config, or a file alone with --snapshot or --onnx")
    return args


def output_files(inputs: list[Path], out_dir: Path) -> list[Path]:
    """One distinct file in `out_dir` per input, none of them an input: `<stem>.jpg` for a
    picture, `<stem>.mp4` for a video, or `<stem>_<extension>.<ext>` when inputs share a stem
    (x.jpg, x.png), with `-2`, `-3`, ... when they still collide (x.jpg in two folders)."""
    stems = Counter(path.stem for path in inputs)
    taken = {path.resolve() for path in inputs}
    outputs = []
    for path in inputs:
        name = path.stem if stems[path.stem] == 1 else f"{path.stem}_{path.suffix.lstrip('.')}"
        ext = ".mp4" if is_video(path) else ".jpg"
        candidate, number = out_dir / f"{name}{ext}", 1
        while candidate.resolve() in taken:
            number += 1
            candidate = out_dir / f"{name}-{number}{ext}"
        taken.add(candidate.resolve())
        outputs.append(candidate)
    return outputs


def open_detector(args: argparse.Namespace) -> Detector:
    """The detector the arguments name: a snapshot file, an .onnx file, or a config."""
    if args.snapshot is not None:
        return Detector.from_snapshot(args.snapshot, args.device, thresh=args.thresh,
                                      threads=args.threads)
    if args.cfg_file is None:
        return Detector.from_onnx(args.onnx, args.device, args.config_dir, args.runtime,
                                  args.precision, thresh=args.thresh, threads=args.threads)
    system_config, db_config = load_config(args.cfg_file, args.config_dir,
                                           overrides=args.overrides)
    testiter = system_config.max_iter if args.testiter is None else args.testiter
    if args.runtime == "torch":
        require_snapshot(system_config, testiter, "pick --testiter")
    network, _ = open_network(args.runtime, system_config, DETECTION(db_config), testiter,
                              args.device, args.onnx, precision=args.precision,
                              threads=args.threads)
    names, category_ids = class_table(system_config, db_config, strict=True,
                                      recorded=network.classes)
    return Detector(network, system_config, db_config, thresh=args.thresh, names=names,
                    category_ids=category_ids, threads=args.threads)


class Outputs:
    """The files a run writes: pictures, one video per video source, the JSON lines."""

    def __init__(self, out_dir: Path, sources: list[Any]) -> None:
        files = [s for s in sources if isinstance(s, Path)]
        self.paths = dict(zip(map(str, files), output_files(files, out_dir)))
        taken = {p.resolve() for p in files} | {p.resolve() for p in self.paths.values()}
        self.json_path, number = out_dir / JSON_LINES, 1
        while self.json_path.resolve() in taken:
            number += 1
            self.json_path = out_dir / f"detections-{number}.jsonl"
        self.out_dir, self.json = out_dir, open(self.json_path, "w")  # noqa: SIM115 - closed by close()
        self.writer: Any = None
        self.video_path: Path | None = None
        self.streams = 0

    def video(self, source: str, fps: float, size: tuple[int, int]) -> Any:
        if self.writer is None:
            path = self.paths.get(source)
            if path is None:  # a camera or a stream
                self.streams += 1
                path = self.out_dir / f"{source.split(':')[0].replace(' ', '')}-" \
                    f"{self.streams}.mp4"
            self.writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
            if not self.writer.isOpened():
                raise StorageError(f"cannot write the video {path} (OpenCV's mp4v writer)")
            self.video_path = path
        return self.writer

    def end_video(self) -> Path | None:
        path, self.video_path = self.video_path, None
        if self.writer is not None:
            self.writer.release()
            self.writer = None
        return path

    def close(self) -> None:
        self.end_video()
        self.json.close()


def drawn_before(images: list[str]) -> set[Path]:
    """The files an earlier run wrote into a folder named among `images` (its DRAWN list)."""
    drawn = set()
    for folder in map(Path, images):
        if (folder / DRAWN).is_file():
            drawn |= {folder / name for name in (folder / DRAWN).read_text().splitlines()}
    return drawn


def main(args: argparse.Namespace) -> list[Path]:
    drawn = drawn_before(args.images)
    sources = [s for s in expand_sources(args.images) if s not in drawn]
    try:  # an unwritable --out is found now, not after the first image
        probe_writable(args.out, "--out")
    except StorageError as err:
        raise UsageError(str(err)) from None
    detector = open_detector(args)
    print("weights: " + ("the average (system.ema_decay)"
                         if detector.network.evaluated_weights == "ema" else "the trained ones"))
    # Ctrl-C or SIGTERM: stop after the current frame, so that the outputs close and play.
    outputs, stop = Outputs(args.out, sources), StopRequest()
    written, bad, count = [], [], 0
    # On a terminal only (disable=None): a log or a pipe gets the summary line, not the bar.
    bar = tqdm(unit="frame", desc="detecting", dynamic_ncols=True, disable=None)
    start = time.perf_counter()
    try:
        for source in sources:
            before = count
            for frame in frames(source):
                if frame.image is None:
                    tqdm.write(f"skipped: {frame.error}")
                    bad.append(frame.source)
                    continue
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
        outputs.close()
        with open(args.out / DRAWN, "a") as listing:  # never taken for inputs by a later run
            listing.writelines(f"{path.name}\n" for path in (*written, outputs.json_path))
    seconds = time.perf_counter() - start
    print(f"drew {len(written)} of {len(sources)} inputs in {args.out}; {count} lines in "
          f"{outputs.json_path}; {count / max(seconds, 1e-9):.1f} frames/s"
          + (f"; unreadable: {', '.join(bad)}" if bad else ""))
    if stop():
        raise Stopped(stop.signum)
    if not written:
        raise UsageError(f"none of the {len(sources)} inputs is a readable image")
    return written


if __name__ == "__main__":
    run_cli(lambda: main(parse_args()),
            on_stop=lambda _: "the outputs so far are closed and complete")

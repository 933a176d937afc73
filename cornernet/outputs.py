"""Where a prediction run writes: a folder of its own, and in it names that are never taken.

`run_folder(None)` is the first of `runs/predict`, `runs/predict2`, ... that does not exist yet
(or is empty), so that a run never writes over an earlier one's outputs. A folder the user names
with --out that holds an earlier run's outputs (its DRAWN list or a detections*.jsonl) is
refused in one line, unless `exist_ok` (--exist-ok): then the run adds to it, and every file it
writes takes a name no file in the folder has (`x-2.jpg`, `detections-2.jsonl`), so that even
then nothing is written over.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2

from core.errors import UsageError
from core.utils.files import StorageError, write_error

from .sources import DRAWN, Frame, is_video

JSON_LINES = "detections.jsonl"
RUNS = Path("runs") / "predict"


def earlier_outputs(folder: Path) -> list[str]:
    """The names of an earlier prediction run's outputs in `folder` (empty when none)."""
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir()
                  if p.name == DRAWN or (p.name.startswith("detections")
                                         and p.suffix == ".jsonl"))


def run_folder(out: Path | None, exist_ok: bool = False, runs: Path = RUNS) -> Path:
    """The folder a prediction run writes into: `out`, refused when it holds an earlier run's
    outputs unless `exist_ok`; without `out`, the first of `runs`, `runs`2, `runs`3, ... that
    does not exist or is empty."""
    if out is not None:
        found = earlier_outputs(out)
        if found and not exist_ok:
            raise UsageError(f"--out {out} holds an earlier run's outputs ({', '.join(found)}): "
                             "name a new folder, leave --out out (runs/predict, "
                             "runs/predict2, ...), or add --exist-ok to add to it (nothing in "
                             "it is written over)")
        return out
    number = 1
    while True:
        folder = runs if number == 1 else runs.with_name(f"{runs.name}{number}")
        if not folder.exists() or (folder.is_dir() and not any(folder.iterdir())):
            return folder
        number += 1


def _free(folder: Path, name: str, ext: str, taken: set[Path]) -> Path:
    """`folder/name.ext`, or `name-2.ext`, `name-3.ext`, ... : the first not in `taken` and
    not on disk; it is added to `taken`."""
    candidate, number = folder / f"{name}{ext}", 1
    while candidate.resolve() in taken or candidate.exists():
        number += 1
        candidate = folder / f"{name}-{number}{ext}"
    taken.add(candidate.resolve())
    return candidate


def output_files(inputs: list[Path], out_dir: Path, taken: set[Path] | None = None) -> list[Path]:
    """One distinct new file in `out_dir` per input, none of them an input or a file already
    there: `<stem>.jpg` for a picture, `<stem>.mp4` for a video, or `<stem>_<extension>.<ext>`
    when inputs share a stem (x.jpg, x.png), with `-2`, `-3`, ... when they still collide (x.jpg
    in two folders, or an x.jpg already in `out_dir`)."""
    stems = Counter(path.stem for path in inputs)
    taken = {path.resolve() for path in inputs} if taken is None else taken
    taken |= {path.resolve() for path in inputs}
    outputs = []
    for path in inputs:
        name = path.stem if stems[path.stem] == 1 else f"{path.stem}_{path.suffix.lstrip('.')}"
        outputs.append(_free(out_dir, name, ".mp4" if is_video(path) else ".jpg", taken))
    return outputs


class JsonLines:
    """A file of JSON lines written one whole line at a time: each `write` is one unbuffered
    write of complete lines, and a write that fails (a full disk) or is interrupted (a second
    Ctrl-C) is cut back to the lines before it, so the file never ends in a torn line. A full
    disk is DiskFull naming the file and the free space."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        self.size = self.lines = 0

    def write(self, lines: str) -> None:
        """Append `lines` (whole lines, each ending in a newline)."""
        data, done = lines.encode(), 0
        try:
            while done < len(data):
                done += os.write(self.fd, data[done:])
        except BaseException as err:
            os.ftruncate(self.fd, self.size)
            os.lseek(self.fd, self.size, os.SEEK_SET)
            if isinstance(err, OSError):
                raise write_error(self.path, err, f"it holds the {self.lines} whole lines "
                                  "written before; free some space or name another --out") \
                    from None
            raise
        self.size += len(data)
        self.lines += lines.count("\n")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(frozen=True)
class SavedPredictions:
    """What a prediction run wrote into its folder.

    Attributes:
        folder: the folder.
        files: the pictures and videos drawn, in the order they were finished.
        json_lines: the JSON-lines file: one line per picture or frame (`Result.to_json`).
        frames: the pictures and frames detected (the lines written).
        unreadable: the inputs that could not be read, by name.
    """

    folder: Path
    files: tuple[Path, ...]
    json_lines: Path
    frames: int
    unreadable: tuple[str, ...]


class Outputs:
    """The files a run writes: pictures, one video per video source, the JSON lines; each under
    a name that no input and no file already in the folder has. `add` each frame's result in
    order, `skip` each unreadable input, and `close` at the end (also after a failure or a stop:
    the files written stay whole and the videos play). `log` gets one line per picture drawn,
    video closed and input skipped."""

    def __init__(self, out_dir: Path, sources: list[Any], thresh: float,
                 log: Callable[[str], None] | None = None) -> None:
        files = [s for s in sources if isinstance(s, Path)]
        self.taken: set[Path] = set()
        self.paths = dict(zip(map(str, files), output_files(files, out_dir, self.taken)))
        self.json_path = _free(out_dir, "detections", ".jsonl", self.taken)
        self.out_dir, self.json = out_dir, JsonLines(self.json_path)
        self.thresh, self.log = thresh, log or (lambda line: None)
        self.writer: Any = None
        self.video_path: Path | None = None
        self.video_source, self.video_frames = "", 0
        self.streams = 0
        self.written: list[Path] = []
        self.unreadable: list[str] = []

    def add(self, frame: Frame, result: Any) -> None:
        """Write the `Result` of `frame`: its JSON line, and its drawing as a picture or as the
        next frame of its source's video."""
        self._end_other_video(frame.source)
        self.json.write(result.to_json() + "\n")
        drawn = result.draw()
        if frame.video is not None:
            self.video(frame.source, frame.video.fps, frame.video.size).write(drawn)
            self.video_frames += 1
            return
        path = self.paths.get(frame.source)
        if path is None:  # a numpy image of the API: array-0.jpg, ...
            path = _free(self.out_dir, frame.source.replace(" ", "-"), ".jpg", self.taken)
        if not cv2.imwrite(str(path), drawn):
            raise StorageError(f"could not write {path}")
        self.log(f"{frame.source}: {len(result)} detections above {self.thresh} -> {path}")
        self.written.append(path)

    def skip(self, frame: Frame) -> None:
        """An input that could not be read (`frame.error` says why)."""
        self._end_other_video(frame.source)
        self.log(f"skipped: {frame.error}")
        self.unreadable.append(frame.source)

    def video(self, source: str, fps: float, size: tuple[int, int]) -> Any:
        if self.writer is None:
            path = self.paths.get(source)
            if path is None:  # a camera or a stream
                self.streams += 1
                path = _free(self.out_dir, f"{source.split(':')[0].replace(' ', '')}-"
                             f"{self.streams}", ".mp4", self.taken)
            writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
            if not writer.isOpened():
                writer.release()
                raise StorageError(f"cannot write the video {path} (OpenCV's mp4v writer)")
            self.writer, self.video_path = writer, path
            self.video_source, self.video_frames = source, 0
        return self.writer

    def _end_other_video(self, source: str) -> None:
        if self.writer is not None and source != self.video_source:
            self.end_video()

    def end_video(self) -> Path | None:
        """Close the video being written (it plays from now on); returns it, or None."""
        path, self.video_path = self.video_path, None
        if self.writer is not None and path is not None:
            self.writer.release()
            self.writer = None
            self.log(f"{self.video_source}: {self.video_frames} frames -> {path}")
            self.written.append(path)
        return path

    def close(self) -> SavedPredictions:
        """Close the files and add the names written to the folder's DRAWN list (never taken
        for inputs by a later run); returns what was written."""
        self.end_video()
        self.json.close()
        try:
            with open(self.out_dir / DRAWN, "a") as listing:
                listing.writelines(f"{path.name}\n" for path in (*self.written, self.json_path))
        except OSError as err:
            raise write_error(self.out_dir / DRAWN, err, "the pictures and JSON lines written "
                              "are whole; free some space") from None
        return SavedPredictions(folder=self.out_dir, files=tuple(self.written),
                                json_lines=self.json_path, frames=self.json.lines,
                                unreadable=tuple(self.unreadable))

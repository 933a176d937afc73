"""What `Detector.predict` reads: pictures, folders, globs, numpy images, videos, cameras and
streams, one frame at a time.

`frames(source)` yields `Frame`s lazily: a video or a stream is read frame by frame with
OpenCV, so memory stays flat whatever its length. Unreadable pictures are skipped with a
`Frame` whose `error` says why (the caller reports it); a source that does not exist is a
UsageError.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from core.errors import UsageError
from core.utils.images import ImageReadError, read_image

VIDEO_SUFFIXES = {".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv",
                  ".flv", ".gif"}
STREAM_PREFIXES = ("rtsp://", "rtmp://", "http://", "https://", "udp://", "tcp://")


@dataclass
class Video:
    """A video or stream being read: frames per second and frame size (width, height)."""

    fps: float
    size: tuple[int, int]


@dataclass
class Frame:
    """One picture or video frame: (H, W, 3) uint8 BGR `image` (None with `error`)."""

    image: np.ndarray | None
    source: str
    index: int = 0
    video: Video | None = None
    error: str | None = None


def is_stream(text: str) -> bool:
    return text.startswith(STREAM_PREFIXES)


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_SUFFIXES


def read_video(target: str | int, name: str) -> Iterator[Frame]:
    """The frames of a video file, camera index or stream URL, one at a time."""
    capture = cv2.VideoCapture(target)
    if not capture.isOpened():
        raise UsageError(f"{name}: cannot open it as a video, camera or stream")
    try:
        fps = capture.get(cv2.CAP_PROP_FPS) or 25.0
        size = (int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
                int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        video, index = Video(fps if 0 < fps < 1000 else 25.0, size), 0
        while True:
            ok, image = capture.read()
            if not ok:
                return
            yield Frame(image, name, index, video)
            index += 1
    finally:
        capture.release()


def _files(text: str) -> list[Path]:
    """The files a path, folder or glob names (folders: their non-hidden files, sorted)."""
    if any(char in text for char in "*?["):
        found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not found:
            raise UsageError(f"{text}: the pattern matches no file")
        return found
    path = Path(text)
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    if path.is_file():
        return [path]
    raise UsageError(f"{text}: no such file, folder, camera or stream")


def expand(source: Any) -> list[Any]:
    """The single sources in `source`: a list is flattened, a folder or glob becomes its files,
    a digit string becomes a camera index; numpy images, URLs and files stay as they are."""
    if isinstance(source, (list, tuple)):
        return [item for entry in source for item in expand(entry)]
    if isinstance(source, (np.ndarray, int)):
        return [source]
    text = str(source)
    if text.isdigit():
        return [int(text)]
    if is_stream(text):
        return [text]
    return _files(text)


def frames(source: Any) -> Iterator[Frame]:
    """Every image of `source` (see `expand`) as a `Frame`, lazily."""
    arrays = 0
    for item in expand(source):
        if isinstance(item, np.ndarray):
            if item.ndim != 3 or item.shape[2] != 3 or item.dtype != np.uint8:
                raise UsageError(f"a numpy image must be (H, W, 3) uint8 BGR, got "
                                 f"{item.shape} {item.dtype}")
            yield Frame(item, f"array {arrays}")
            arrays += 1
        elif isinstance(item, int):
            yield from read_video(item, f"camera {item}")
        elif isinstance(item, str):
            yield from read_video(item, item)
        elif is_video(item):
            yield from read_video(str(item), str(item))
        else:
            try:
                yield Frame(read_image(item), str(item))
            except ImageReadError as err:
                yield Frame(None, str(item), error=str(err))

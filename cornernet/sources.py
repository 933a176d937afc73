"""What `Detector.predict` reads: pictures, folders, globs, numpy images, videos, cameras and
streams, one frame at a time.

`frames(source)` yields `Frame`s lazily, one source after the other: a video or a stream is
read frame by frame with OpenCV, so memory stays flat whatever its length. A picture, video,
camera or stream that cannot be read is one `Frame` whose `error` says why (the caller counts
and names it) and the next source is read. What a name is, is decided by what exists on disk
first: a folder `2024/` is a folder, not camera 2024. An input named twice is read once. A name
that is nothing (no file, folder, camera or stream, a glob matching nothing) is a UsageError,
raised by `expand` before anything is read.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
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
# In an output folder: the names of the files `cornernet predict` wrote there, so that a folder
# or glob that reaches them never reads them as inputs.
DRAWN = ".demo-drawn"


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


def _unreadable(name: str, why: str) -> Frame:
    return Frame(None, name, error=f"{name}: {why}")


def read_video(target: str | int, name: str) -> Iterator[Frame]:
    """The frames of a video file, camera index or stream URL, one at a time; one that cannot
    be opened, or gives no frame, is one `Frame` with its `error` (the next source is read)."""
    capture = cv2.VideoCapture(target)
    try:
        if not capture.isOpened():
            yield _unreadable(name, "cannot be opened as a video, camera or stream")
            return
        fps = capture.get(cv2.CAP_PROP_FPS) or 25.0
        size = (int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
                int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        video, index = Video(fps if 0 < fps < 1000 else 25.0, size), 0
        while True:
            ok, image = capture.read()
            if not ok:
                break
            yield Frame(image, name, index, video)
            index += 1
        if index == 0:
            yield _unreadable(name, "no frame of it could be read (a damaged or empty video)")
    finally:
        capture.release()


def as_image(array: Any, name: str) -> np.ndarray:
    """`array` as the (H, W, 3) uint8 BGR contiguous image the networks take: a gray (H, W) or
    (H, W, 1) image and a BGRA (H, W, 4) one are converted, odd strides made contiguous; any
    other shape or dtype is a UsageError naming it."""
    if not isinstance(array, np.ndarray):
        raise UsageError(f"{name}: expected a numpy image (H, W, 3) uint8 BGR, got "
                         f"{type(array).__name__}")
    if array.dtype != np.uint8:
        raise UsageError(f"{name}: a numpy image must be uint8 (0..255, BGR), got dtype "
                         f"{array.dtype}; convert it, e.g. with "
                         "np.clip(image, 0, 255).astype(np.uint8)")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (3, 4)):
        if min(array.shape[:2]) == 0:
            raise UsageError(f"{name}: an empty image of shape {array.shape}")
        array = np.ascontiguousarray(array)
        if array.ndim == 2:
            return cv2.cvtColor(array, cv2.COLOR_GRAY2BGR)
        return cv2.cvtColor(array, cv2.COLOR_BGRA2BGR) if array.shape[2] == 4 else array
    raise UsageError(f"{name}: a numpy image must be (H, W, 3) BGR (or (H, W) gray, (H, W, 4) "
                     f"BGRA), got shape {array.shape}")


def drawn_here(folder: Path) -> set[Path]:
    """The files that `cornernet predict` wrote into `folder` (its DRAWN list)."""
    listing = folder / DRAWN
    if not listing.is_file():
        return set()
    return {folder / name for name in listing.read_text().splitlines() if name}


def _files(text: str) -> list[Path]:
    """The files a path, folder or glob names (folders: their non-hidden files, sorted); in a
    folder or a glob, the pictures a prediction run drew are left out."""
    path = Path(text)
    if path.is_file():  # a file named itself is read, whatever wrote it
        return [path]
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    elif path.exists():
        raise UsageError(f"{text}: not a regular file but {_file_kind(path)}; name a picture, "
                         "video, folder or glob")
    else:
        found = _glob(text)
        if not found:
            raise UsageError(f"{text}: the pattern matches no file")
    drawn: set[Path] = set()
    for folder in {p.parent for p in found}:
        drawn |= drawn_here(folder)
    return [p for p in found if p not in drawn]


def _file_kind(path: Path) -> str:
    mode = path.stat().st_mode
    for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "neither a file nor a folder"


def _glob(pattern: str) -> list[Path]:
    """The regular files `pattern` matches, sorted, each once. Without `**` it is glob's; with
    it, the folders below the pattern's fixed start are walked once each, following a link
    into a folder only when that folder was not reached before (Python's recursive glob
    follows a link loop until the path is too long: minutes)."""
    parts = Path(pattern).parts
    if "**" not in parts:
        return sorted(Path(p) for p in glob.glob(pattern) if Path(p).is_file())
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    root, wanted = Path(*parts[:fixed]) if fixed else Path(), parts[fixed:]
    hidden = any(part.startswith(".") for part in wanted)  # else no hidden folder can match
    found, seen = [], set()
    for folder, subfolders, names in os.walk(root, followlinks=True):
        info = os.stat(folder)
        if (info.st_dev, info.st_ino) in seen:
            subfolders.clear()
            continue
        seen.add((info.st_dev, info.st_ino))
        subfolders[:] = sorted(name for name in subfolders if hidden or name[0] != ".")
        here = Path(folder).relative_to(root).parts
        found += [Path(folder, name) for name in names
                  if _matches((*here, name), wanted) and Path(folder, name).is_file()]
    return sorted(found)


def _matches(parts: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    """Whether the path `parts` matches the glob `pattern`, part by part: `**` is any number
    of folders, and a hidden name matches only a pattern part that starts with a dot (as
    glob's)."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_matches(parts[k:], pattern[1:]) for k in range(len(parts) + 1)
                   if not any(part.startswith(".") for part in parts[:k]))
    return (bool(parts) and parts[0].startswith(".") == pattern[0].startswith(".")
            and fnmatch.fnmatchcase(parts[0], pattern[0]) and _matches(parts[1:], pattern[1:]))


def _kind(text: str) -> str:
    """What `text` names, decided first by what exists on disk: "path" (a file or folder), then
    "stream" (a URL), "camera" (digits only), "glob"; a UsageError when it names nothing."""
    if not text.strip():
        raise UsageError("an empty source name: name a file, folder, glob, camera or stream")
    if Path(text).exists():
        return "path"
    if is_stream(text):
        return "stream"
    if text.isdigit():
        return "camera"
    if any(char in text for char in "*?["):
        return "glob"
    raise UsageError(f"{text}: no such file, folder, camera or stream")


def _key(item: Any) -> Any:
    """What makes two sources the same input (a path by its resolved location)."""
    if isinstance(item, Path):
        return ("path", item.resolve())
    return None if isinstance(item, np.ndarray) else (type(item).__name__, item)


def expand(source: Any) -> list[Any]:
    """The single sources in `source`, each input once (the first time it is named): a list
    is flattened, a folder or glob becomes its files, a digit string that names nothing on disk
    a camera index; numpy images, URLs and files stay as they are."""
    items = _expand(source)
    seen: set[Any] = set()
    unique = []
    for item in items:
        key = _key(item)
        if key is None or key not in seen:
            unique.append(item)
            seen.add(key)
    return unique


def _expand(source: Any) -> list[Any]:
    if isinstance(source, (list, tuple)):
        return [item for entry in source for item in _expand(entry)]
    if isinstance(source, np.ndarray) or (isinstance(source, int) and
                                          not isinstance(source, bool)):
        return [source]
    if not isinstance(source, (str, Path)):
        raise UsageError(f"source {source!r}: expected a path, folder, glob, URL, camera index "
                         f"or numpy image, got {type(source).__name__}")
    text = str(source)
    kind = _kind(text)
    if kind == "camera":
        return [int(text)]
    return [text] if kind == "stream" else _files(text)


def frames(source: Any) -> Iterator[Frame]:
    """Every image of `source` (see `expand`) as a `Frame`, lazily, one source after the
    other: a picture or video that cannot be read is a `Frame` with its `error`, never an
    exception, so that the sources after it are read."""
    arrays = 0
    for item in expand(source):
        if isinstance(item, np.ndarray):
            yield Frame(as_image(item, f"array {arrays}"), f"array {arrays}")
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

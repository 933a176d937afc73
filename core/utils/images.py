"""Reading images from disk, loudly: a missing, unreadable or truncated file is an error
naming it, and what the JPEG decoder warns about names the image.

libjpeg prints its warnings ("Corrupt JPEG data: 2 extraneous bytes before marker 0xd9") to
the process's stderr with no file name, once per decode, so a run showed dozens nobody could
trace. `read_image` catches them (stderr's file descriptor points at a temp file during the
decode) and says each image's once per process, naming it: on stderr, or, in a prefetch worker
(`collect_decoder_warnings`), into the batch's meta, which the trainer says once per run.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from ..errors import UserMistake

_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"
# Some encoders pad after the end-of-image marker; look for it this far from the end.
_EOI_SEARCH_BYTES = 1024


class ImageReadError(UserMistake, OSError):
    """An image file is missing, unreadable or truncated; `.path` names it, `.reason` says why."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"cannot read image {path}: {reason}")
        self.path = str(path)
        self.reason = reason

    def __reduce__(self) -> tuple[type[ImageReadError], tuple[str, str]]:
        # Worker processes send this through a queue; OSError's default pickling would call
        # __init__ with the formatted message alone.
        return type(self), (self.path, self.reason)


# What libjpeg (its warnings: jerror.h's JWRN_*), libpng and OpenCV's own loaders print.
_DECODER_LINE = re.compile(rb"(Corrupt JPEG data|Premature end of JPEG|Warning: |Invalid |"
                           rb"Inconsistent |Unknown APP|Application transferred|Bogus |"
                           rb"libpng |\[ ?WARN)")
_decoding = threading.Lock()  # stderr is one per process: one decode at a time redirects it
_capture: tuple[int, int] | None = None  # (pid, fd of an unlinked temp file) for stderr
_said: set[str] = set()  # images whose decoder warnings this process has said or collected
_collected: list[list[str]] | None = None  # [path, text] in a worker, else None: say them


def decoder_line(path: str, text: str) -> str:
    """The line that says what the JPEG decoder found in the image at `path`."""
    return (f"warning: image {path}: the JPEG decoder says \"{'; '.join(text.splitlines())}\" "
            f"(the image is used as decoded; re-save it to clear this)")


def first_time(path: str) -> bool:
    """Whether this process has not yet said (or collected) the decoder warnings of `path`;
    from now on it has."""
    if path in _said:
        return False
    _said.add(path)
    return True


def collect_decoder_warnings() -> None:
    """From now on this process (a prefetch worker) keeps decoder warnings for
    `take_decoder_warnings` instead of saying them on stderr."""
    global _collected
    _collected = []


def take_decoder_warnings() -> list[list[str]]:
    """The [path, text] of the images whose decoder warnings were collected since last time."""
    taken = list(_collected or [])
    if _collected:
        _collected.clear()
    return taken


def say_decoder_warnings(found: list[list[str]], log: Callable[[str], None]) -> None:
    """Say to `log` each [path, text] collected by a worker, once per image in this process."""
    for path, text in found:
        if first_time(path):
            log(decoder_line(path, text))


def _decode(data: bytes) -> tuple[np.ndarray | None, str]:
    """cv2.imdecode of `data`, and what the decoder wrote to stderr meanwhile (stripped)."""
    global _capture
    with _decoding:
        if _capture is None or _capture[0] != os.getpid():  # a fresh one in a forked process
            fd, name = tempfile.mkstemp(prefix="cornernet-decoder-")
            os.unlink(name)
            _capture = (os.getpid(), fd)
        fd = _capture[1]
        saved = os.dup(2)
        try:
            os.dup2(fd, 2)
            image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        size = os.fstat(fd).st_size
        if not size:
            return image, ""
        caught = os.pread(fd, size, 0)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)  # stderr shares this offset: the next write starts at 0
    return image, _decoders_own(caught)


def _decoders_own(caught: bytes) -> str:
    """The decoder's lines of what stderr caught during a decode; the rest (another thread's
    writes in that time: a progress bar, a warning) goes on to stderr as it was."""
    own, others = [], []
    for line in caught.split(b"\n"):
        found = _DECODER_LINE.search(line)
        start = found.start() if found else len(line)
        others.append(line[:start])  # a progress bar redrawn with "\r" ends in no newline
        if found:
            own.append(line[start:].decode(errors="replace").strip())
    if any(others):
        os.write(2, b"\n".join(part for part in others if part))
    return "\n".join(own)


def _tell(path: str, text: str) -> None:
    if not first_time(path):
        return
    if _collected is not None:
        _collected.append([path, text])
    else:
        print(decoder_line(path, text), file=sys.stderr, flush=True)


def read_image(path: str | Path) -> np.ndarray:
    """The image at `path` as (H, W, 3) uint8 BGR; grayscale files come back with 3 channels.

    cv2 decodes a truncated JPEG without an error (a libjpeg warning, a partial image), so a
    JPEG must end with its end-of-image marker; the check reads only the bytes already in memory.
    What the decoder warns about is said once, naming the file (see the module's docstring).
    """
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise ImageReadError(path, "file not found") from None
    except OSError as err:
        raise ImageReadError(path, err.strerror or str(err)) from None
    if not data:
        raise ImageReadError(path, "file is empty")
    if data.startswith(_JPEG_SOI) and data.rfind(_JPEG_EOI, -_EOI_SEARCH_BYTES) < 0:
        raise ImageReadError(path, f"truncated JPEG ({len(data)} bytes, no end-of-image marker)")
    image, said = _decode(data)
    if said:
        _tell(str(path), said)
    if image is None:
        raise ImageReadError(path, f"not a decodable image ({len(data)} bytes)")
    return image

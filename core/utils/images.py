"""Reading images from disk, loudly: a missing, unreadable or truncated file is an error
naming it."""

from __future__ import annotations

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


def read_image(path: str | Path) -> np.ndarray:
    """The image at `path` as (H, W, 3) uint8 BGR; grayscale files come back with 3 channels.

    cv2 decodes a truncated JPEG without an error (a libjpeg warning, a partial image), so a
    JPEG must end with its end-of-image marker; the check reads only the bytes already in memory.
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
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ImageReadError(path, f"not a decodable image ({len(data)} bytes)")
    return image

"""Detections of a test run written as they are made, so that an interrupted run continues.

The journal is a JSON-lines file next to the results: a header with the run's fingerprint (the
resolved settings, the snapshot file, the split, the images, the batching and the device), then
one line per image as soon as it is done. Floats are written in full (a float32 round-trips
through its shortest float64 repr), so detections read back are the ones that were made and a
resumed run ends with the results of an uninterrupted one. A last line cut short by a kill is
dropped. A journal of other settings is never continued: the run starts afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from .loop import DetectionRun, ImageResult


@dataclass
class Done:
    """What a journal already holds: detections and unreadable images by image id."""

    detections: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)
    unreadable: dict[int, str] = field(default_factory=dict)

    def __contains__(self, image_id: int) -> bool:
        return image_id in self.detections or image_id in self.unreadable

    def restart_at(self, image_ids: Sequence[int], batch_size: int) -> int:
        """Where a resumed run starts in `image_ids`: after the images done in a row from the
        first, less the part of a batch, so that every image is batched as in an
        uninterrupted run (whole batches are redone)."""
        finished = next((k for k, image_id in enumerate(image_ids) if image_id not in self),
                        len(image_ids))
        return finished - finished % batch_size

    def with_run(self, run: DetectionRun) -> tuple[dict[int, dict[int, np.ndarray]],
                                                   dict[int, str]]:
        """(detections, unreadable) of the journal and `run` together: what the run found
        overrides what the journal held for the same image."""
        detections = {image_id: dets for image_id, dets in {**self.detections,
                                                            **run.detections}.items()
                      if image_id not in run.unreadable}
        unreadable = {image_id: reason for image_id, reason in {**self.unreadable,
                                                                **run.unreadable}.items()
                      if image_id not in run.detections}
        return detections, unreadable


def snapshot_identity(path: Path) -> dict:
    """Enough to tell two snapshot files apart (for a journal's fingerprint): size,
    modification time, first MiB's hash."""
    stat = path.stat()
    with open(path, "rb") as file:
        head = hashlib.sha256(file.read(1 << 20)).hexdigest()
    return {"file": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "head": head}


class Journal:
    """An open journal: `record` each image, `close` or `remove` at the end."""

    def __init__(self, path: Path, file: IO[str]) -> None:
        self.path = path
        self._file = file

    @classmethod
    def open(cls, path: Path, fingerprint: dict, num_classes: int,
             resume: bool = True) -> tuple[Journal, Done, str]:
        """Continue the journal at `path` when its fingerprint matches, else start one.

        Returns:
            The journal, what it already holds, and a one-line note for the user.
        """
        path = Path(path)
        header = json.dumps({"fingerprint": fingerprint}, sort_keys=True, default=str)
        done, note = Done(), ""
        if path.is_file() and resume:
            done, valid_bytes, old, damaged = _read(path, header, num_classes)
            if old is None:
                file = open(path, "r+", encoding="utf-8")  # noqa: SIM115 - kept open
                file.truncate(valid_bytes)
                file.seek(valid_bytes)
                count = len(done.detections) + len(done.unreadable)
                note = f"resuming: {count} images already done ({path})"
                if damaged:
                    note += (f"; line {damaged} is damaged: it and the lines after it are "
                             f"detected again (--no-resume starts afresh)")
                return cls(path, file), done, note
            note = (f"starting afresh: {path} was made with other {', '.join(old)}")
        elif path.is_file():
            note = f"starting afresh (--no-resume): replacing {path}"
        file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - kept open
        file.write(header + "\n")
        file.flush()
        return cls(path, file), Done(), note

    def record(self, result: ImageResult) -> None:
        """Append one image's outcome and hand it to the operating system at once."""
        if result.detections is None:
            entry: dict[str, Any] = {"id": result.image_id, "unreadable": result.error}
        else:
            entry = {"id": result.image_id,
                     "dets": {str(cls): boxes.tolist()
                              for cls, boxes in result.detections.items() if len(boxes)}}
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def remove(self) -> None:
        """The run is complete and scored: the journal is no longer needed."""
        self.close()
        os.unlink(self.path)


def _read(path: Path, header: str,
          num_classes: int) -> tuple[Done, int, list[str] | None, int]:
    """Parse a journal: (what it holds, bytes of whole lines, None or what differs, the number
    of the first damaged line or 0). A line cut by a kill ends the journal silently; one that
    does not read as an entry (edited by hand, a flipped byte) ends it too, and is named."""
    done = Done()
    with open(path, "rb") as file:
        first = file.readline()
        try:
            old = json.loads(first)["fingerprint"]
        except (ValueError, KeyError, TypeError):
            return done, 0, ["contents (not a journal)"], 0
        new = json.loads(header)["fingerprint"]
        if old != new:
            return done, 0, [key for key in new if old.get(key) != new[key]] or ["settings"], 0
        valid = len(first)
        for number, line in enumerate(file, start=2):
            if not line.endswith(b"\n"):
                break  # cut short by a kill: this line is redone
            try:
                _add(done, json.loads(line), num_classes)
            except (ValueError, KeyError, TypeError, AttributeError):
                return done, valid, None, number
            valid += len(line)
    return done, valid, None, 0


def _add(done: Done, entry: dict, num_classes: int) -> None:
    image_id = int(entry["id"])
    if "unreadable" in entry:
        done.unreadable[image_id] = entry["unreadable"]
        done.detections.pop(image_id, None)
        return
    dets = entry["dets"]
    done.detections[image_id] = {
        cls: np.asarray(dets.get(str(cls), []), dtype=np.float32).reshape(-1, 5)
        for cls in range(1, num_classes + 1)
    }
    done.unreadable.pop(image_id, None)

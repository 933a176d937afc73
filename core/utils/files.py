"""Output files and the room they need: atomic writes, stale temp files, start-up checks.

Every output (snapshot, dataset cache) is written to a temporary file beside its target, made
durable and renamed over it, so a crash or a full disk leaves the previous file whole. The
temporary name carries the writer's pid and start time, `.<name>.<pid>-<start>.tmp`, so a
later run can tell the leftovers of a dead writer from a write in progress.

The checks run before the long part of a run and fail with one line naming the folder, what is
needed, what is there and what to do: `probe_writable`, `check_free_disk` (with
`snapshot_bytes`) and `check_shm` (with `shm_need`). Free space is looked up through
`disk_free`, which tests replace.
"""

from __future__ import annotations

import errno
import io
import math
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import RunFailure, UserMistake
from .procs import is_alive, process_identity

_FULL = (errno.ENOSPC, errno.EDQUOT)
_TEMP = re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)(?:-(?P<start>\d+))?\.tmp$")


class StorageError(OSError):
    """A file could not be written or a folder lacks room; str() is the one-line message.

    A family, not a kind: each member below says whether it is the user's to fix or a failure
    of the run (`core.errors`)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(code, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NotWritable(UserMistake, StorageError):
    """A folder or file cannot be written (permissions, read-only file system)."""


class DiskFull(RunFailure, StorageError):
    """The disk lacks room for a file (ENOSPC, EDQUOT), now or for the run ahead: a failure of
    the run (a disk that fills mid-run is nobody's typing mistake)."""


class ShmTooSmall(UserMistake, StorageError):
    """/dev/shm has less room than the prefetch rings need."""


def format_bytes(count: float) -> str:
    """`count` bytes in binary units, as `docker --shm-size` counts them: '64.0 MiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def disk_free(folder: Path) -> int:
    """Bytes an unprivileged process may still write on the file system holding `folder`
    (or its nearest existing ancestor)."""
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize


# ---------------------------------------------------------------------------------- writing
def temp_path(path: Path) -> Path:
    """The temporary file this process writes `path` through: `.<name>.<pid>-<start>.tmp`."""
    pid, started = process_identity(os.getpid())
    return path.with_name(f".{path.name}.{pid}-{started or 0}.tmp")


class _FdWriter:
    """A seekable binary writer over a raw descriptor that keeps the first OSError it raised.

    Writers like torch.save turn a failed write into their own RuntimeError; `error` keeps
    the cause (a full disk) so it can be reported as what it is.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        view = memoryview(data).cast("B")
        try:
            done = 0
            while done < len(view):
                done += os.write(self.fd, view[done:])
        except OSError as err:
            self.error = self.error or err
            raise
        return done

    def read(self, size: int = -1) -> bytes:
        """Write-only, like a file opened "wb" (whose `read` exists and refuses)."""
        raise io.UnsupportedOperation("read")

    def tell(self) -> int:
        return os.lseek(self.fd, 0, os.SEEK_CUR)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return os.lseek(self.fd, offset, whence)

    def seekable(self) -> bool:
        return True

    def flush(self) -> None:
        """Writes go straight to the descriptor; nothing is buffered here."""


def write_file_atomic(path: Path, write: Callable[[BinaryIO], Any],
                      elsewhere: str = "set system.cache_dir to another disk") -> None:
    """Call `write(file)` on a temporary file beside `path`, fsync it, rename it over `path`.

    The file gets the permissions of any new file (0666 less the umask). A crash at any
    moment leaves the old file or the new one, never a torn one. Raises DiskFull when the
    disk or quota is full and NotWritable for any other OSError, each naming `path`; the
    previous `path` is then unchanged, and a failure to remove the temporary file is added to
    the message, never put in the first error's place. `elsewhere` is the way out a full disk
    names besides freeing space.
    """
    path = Path(path)
    tmp = temp_path(path)
    writer = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = _FdWriter(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))
        try:
            write(writer)
            os.fsync(writer.fd)
        finally:
            os.close(writer.fd)
        os.replace(tmp, path)
        _fsync_folder(path.parent)
    except BaseException as err:
        cause = writer.error if writer is not None and writer.error is not None else err
        leftover = _remove_quietly(tmp)
        if isinstance(cause, OSError):
            raise write_error(path, cause, "the previous file is unchanged; free some space "
                              f"or {elsewhere}{leftover}", leftover) from err
        raise


def write_atomic(obj: Any, path: Path) -> None:
    """torch.save `obj` to `path` through `write_file_atomic`."""
    import torch  # here, not at the top: reading and plotting files needs no torch

    write_file_atomic(path, lambda file: torch.save(obj, file))


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> str:
    """Remove `path` if it exists; a failure is returned as text, never raised."""
    try:
        path.unlink(missing_ok=True)
    except OSError as err:
        return f"; the partial file {path} could not be removed ({err.strerror}), delete it"
    return ""


def write_error(path: Path, err: OSError, kept: str, leftover: str = "") -> StorageError:
    """The failure `err` to write `path` as one line: DiskFull naming the path and the free
    space, then `kept` (what is still whole, what to do); NotWritable naming the path else."""
    if err.errno in _FULL:
        return DiskFull(f"disk full: cannot write {path} ({_free_text(path.parent)}); {kept}",
                        err.errno)
    return NotWritable(f"cannot write {path}: {err.strerror or err}{leftover}", err.errno)


def _free_text(folder: Path) -> str:
    try:
        return f"{format_bytes(disk_free(folder))} free there"
    except OSError:
        return "free space unknown"


def dead_writers_temp_paths(folder: Path, folders: bool = False) -> dict[Path, str]:
    """The temporary files in `folder` (not below it) whose writer is dead, each with the name
    of the target it was written for; with `folders`, temporary folders of the same name
    pattern too (a conversion's unfinished split).

    A writer counts as dead when its pid is gone or now belongs to a process that started at
    another time. Files whose name carries no pid, or whose writer lives, are left out (a
    concurrent run may be writing them). Sorted by path.
    """
    found = {}
    for path in sorted(Path(folder).glob(".*.tmp")):
        match = _TEMP.match(path.name)
        if match is None or path.is_symlink() or not (
                path.is_file() or (folders and path.is_dir())):
            continue
        writer = (int(match["pid"]), match["start"] or "")
        if writer[1] == "0":  # written where /proc was unreadable: judge by the pid alone
            writer = (writer[0], "")
        if not is_alive(writer):
            found[path] = match["target"]
    return found


def remove_stale_temp_files(folder: Path, folders: bool = False) -> list[Path]:
    """Remove `dead_writers_temp_paths(folder, folders)`; returns the removed paths, sorted."""
    removed = list(dead_writers_temp_paths(folder, folders))
    for path in removed:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return removed


def move_aside(path: Path) -> Path:
    """Rename `path` to `<stem>.aside<k><suffix>` beside it, k the first free number; returns
    the new path. A damaged state file is kept this way for a person to read, never deleted."""
    k = 1
    while (aside := path.with_name(f"{path.stem}.aside{k}{path.suffix}")).exists():
        k += 1
    path.rename(aside)
    return aside


# ------------------------------------------------------------------------- start-up checks
def probe_writable(folder: Path, setting: str = "the configured folder") -> None:
    """Create `folder` if needed and write, sync and remove a probe file in it.

    Raises NotWritable (one line naming the folder, the reason and `setting`, the config key
    that chose it) and DiskFull when not even the probe fits.
    """
    folder = Path(folder)
    probe = folder / f".write-probe.{os.getpid()}.tmp"
    created = False
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        created = True
        try:
            os.write(fd, b"probe")
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as err:
        # Only a probe this call created can be left over (never ask to delete what never was).
        leftover = _remove_quietly(probe) if created else ""
        if err.errno in _FULL:
            raise DiskFull(f"disk full: cannot write in {folder}; free some space or point "
                           f"{setting} at another disk{leftover}", err.errno) from None
        reason = ("a file, not a folder" if folder.exists() and not folder.is_dir()
                  else err.strerror or err)
        raise NotWritable(f"cannot write in {folder} ({reason}); make it "
                          f"writable or point {setting} at a folder you can write to"
                          f"{leftover}", err.errno) from None


def snapshot_bytes(num_params: int, with_optimizer_state: bool) -> int:
    """Upper estimate of one snapshot's size for `num_params` float32 parameters.

    The optimizer state counts as two tensors per parameter (Adam's moments; SGD keeps at
    most one); 1 MiB plus 1 % covers buffers, the config, RNG states and the container.
    """
    tensors = 3 if with_optimizer_state else 1
    return int(4 * num_params * tensors * 1.01) + 2 ** 20


def check_free_disk(folder: Path, need_bytes: int, what: str = "two snapshots",
                    setting: str = "system.cache_dir") -> None:
    """Raise DiskFull unless the disk holding `folder` has `need_bytes` free."""
    free = disk_free(folder)
    if free < need_bytes:
        raise DiskFull(f"not enough free disk in {folder}: {what} need {format_bytes(need_bytes)}"
                       f", {format_bytes(free)} free; free some space or point {setting} at "
                       f"another disk")


# ----------------------------------------------------------------------- shared memory
def check_shm(need: int, path: Path | str = "/dev/shm") -> None:
    """Raise ShmTooSmall unless `path` has `need` bytes free; nothing to check without it."""
    if not Path(path).is_dir():
        return
    free = disk_free(Path(path))
    if free >= need:
        return
    size = 64 * math.ceil(need * 1.25 / 2 ** 26)  # a Docker size with room for the rest
    raise ShmTooSmall(f"the prefetch rings need {format_bytes(need)} of shared memory but {path} "
                      f"has {format_bytes(free)} free; use fewer --workers, a smaller "
                      f"system.prefetch_size, or more shared memory (Docker: "
                      f"--shm-size={size}m)", errno.ENOSPC)


"""One run per snapshot folder: `<folder>/.lock` holds the pid, start time and host of its run.

Two runs writing one folder take over each other's snapshots and metrics without a word. So
rank 0 takes the lock before it writes anything: a lock of a live run is an error naming that
run; a lock whose process is gone (killed, this host) is taken over and said; a lock from
another host cannot be checked from here and is an error saying how to remove it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import ConfigError
from .procs import is_alive, process_identity

NAME = ".lock"
_held: dict[Path, int] = {}  # each lock file this process holds -> the thread that took it
_table = threading.Lock()  # commands on several threads take and release locks at once


def acquire(folder: Path, log: Callable[[str], None],
            elsewhere: str = "set system.snapshot_name to write elsewhere") -> Path:
    """Take the lock of `folder` (which exists) for this process; returns the lock file.

    Raises ConfigError when another live run, or a run on another host, holds it; the message
    ends with `elsewhere` (how to write to another folder).
    """
    path = folder / NAME
    pid, started = process_identity(os.getpid())
    mine = json.dumps({"pid": pid, "started": started, "host": socket.gethostname()})
    for _ in range(3):  # a stale lock removed by two runs at once: one of them wins the next go
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            _take_over_if_stale(path, log, elsewhere)
            continue
        with os.fdopen(fd, "w") as file:
            file.write(mine)
        with _table:
            _held[path] = threading.get_ident()
        return path
    raise ConfigError(f"{folder} is being locked by another run at this moment ({path}); "
                      f"start one run per snapshot folder")


def _take_over_if_stale(path: Path, log: Callable[[str], None], elsewhere: str) -> None:
    """Remove `path` if its run is gone; raise ConfigError if it may still be running."""
    try:
        owner = json.loads(path.read_text())
        pid, started, host = int(owner["pid"]), str(owner["started"]), str(owner["host"])
    except FileNotFoundError:
        return  # released meanwhile
    except (OSError, ValueError, KeyError, TypeError):
        log(f"note: took over {path}: it was damaged")
        path.unlink(missing_ok=True)
        return
    if host != socket.gethostname():
        raise ConfigError(f"{path.parent} is in use by the run of pid {pid} on host {host}; "
                          f"if that run is gone, remove {path}; or {elsewhere}")
    if is_alive((pid, started)):
        raise ConfigError(f"{path.parent} is in use by the run of pid {pid} on this host; "
                          f"wait for it or stop it, or {elsewhere}")
    log(f"note: took over {path}: its run (pid {pid}) is no longer running")
    path.unlink(missing_ok=True)


def release(path: Path) -> None:
    """Remove the lock file `path` that `acquire` returned (another thread's locks stay)."""
    with _table:
        if _held.pop(path, None) is None:
            return
    with contextlib.suppress(OSError):
        path.unlink()


def held() -> list[Path]:
    """The lock files this process holds now, oldest first."""
    with _table:
        return list(_held)


def release_all(keep: Iterable[Path] = (), thread: int | None = None) -> None:
    """Remove the locks this process holds (at the end of the run, however it ended), but those
    in `keep`; with `thread`, only those that thread took (a command run on one thread leaves
    another's locks alone)."""
    keep = set(keep)
    with _table:
        mine = [path for path, taker in _held.items()
                if path not in keep and thread in (None, taker)]
        for path in mine:
            del _held[path]
    for path in mine:
        with contextlib.suppress(OSError):
            path.unlink()


def remove_empty(*folders: Path) -> None:
    """Remove each folder, and then its parent, while they are empty (a run refused at start
    leaves no folder it created behind)."""
    for folder in folders:
        for path in (folder, folder.parent):
            try:
                path.rmdir()
            except OSError:  # not empty, or not there
                break

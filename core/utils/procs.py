"""Processes and their lifetime: identity, watching a parent, ending at once, leftovers.

A process is identified by its pid and start time, so that a reused pid is never taken for the
process that held it before: prefetch workers watch their trainer with it, training ranks their
launcher (`watch_launcher`), and temp files name their writer. `end_now` leaves at once with
the fork server; `remove_dead_mp_folders` clears what multiprocessing leaves after a kill -9.

A process started by spawn or a fork server (prefetch workers, spawned ranks) first imports the
parent's main script again, as multiprocessing does, so that what the script defines can be
unpickled there. A script that calls a command at its top level, without
`if __name__ == "__main__":`, would run that command again in every such process: the command
recognises the case first (`leave_if_reimported`) and the process leaves with
`REIMPORTED_MAIN`, which its parent turns into one line (`UnguardedMain`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import UserMistake

# The exit status of a process that left because it was importing its parent's main script and
# reached a command there: one the exit table never gives (0, 1, 2, 75, 128 + a signal).
REIMPORTED_MAIN = 3


def process_identity(pid: int) -> tuple[int, str]:
    """(pid, start time): tells a process apart from a later one that reuses its pid."""
    fields = _proc_stat(pid)
    return pid, fields[19] if len(fields) > 19 else ""


def is_alive(identity: tuple[int, str]) -> bool:
    """Whether the process `identity` (from `process_identity`) still runs (a zombie does not)."""
    pid, started = identity
    if started:
        fields = _proc_stat(pid)
        return len(fields) > 19 and fields[19] == started and fields[0] != "Z"
    try:  # no /proc: the pid alone
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _proc_stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state first); [] if none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


class UnguardedMain(UserMistake):
    """The main script calls a command at its top level, so every child process (which imports
    the script again) would run it too."""

    def __init__(self, who: str) -> None:
        main = sys.modules.get("__main__")
        script = getattr(main, "__file__", None) or "the main script"
        super().__init__(f"{who} stopped at its start: it imports {script} again (as every "
                         f"process started by spawn or a fork server does), which calls a "
                         f"cornernet command at its top level; put that call under "
                         f'`if __name__ == "__main__":` (docs/prediction-and-api.md)')


def leave_if_reimported() -> None:
    """Leave at once, silently, with REIMPORTED_MAIN when this process is a child of spawn or a
    fork server still importing its parent's main script: multiprocessing's `_inheriting` is
    set while the child prepares and unpickles its work, the one moment a command can be
    reached from there. The parent says why, in one line (`UnguardedMain`)."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        os._exit(REIMPORTED_MAIN)


# Called with the reason before a rank leaves because its launcher is gone: the PeerWatch's
# `report`, so that the ranks of other nodes learn it at once, not from a broken collective.
before_leaving: list[Callable[[str], None]] = []


def end_now(status: int) -> None:
    """End this process at once (`os._exit`: its main thread may be stuck in a collective),
    with its fork server: left alone, that one outlives the process by seconds."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    os._exit(status)


def watch_launcher(launcher: tuple[int, str], rank: str, poll_s: float = 0.5) -> None:
    """Leave (os._exit(1), saying so) within `poll_s` seconds of the death of the process
    `launcher` (a `process_identity`). This process's prefetch workers watch it in turn."""

    def run() -> None:
        while is_alive(launcher):
            time.sleep(poll_s)
        reason = f"its launcher (pid {launcher[0]}) is gone (killed?)"
        for tell in before_leaving:
            tell(reason)
        print(f"error: {rank} stopping: {reason}; the run ends here, resume it with --iter "
              f"latest", file=sys.stderr, flush=True)
        end_now(1)

    threading.Thread(target=run, daemon=True, name="launcher-watch").start()


def remove_dead_mp_folders(folder: Path | None = None) -> list[Path]:
    """Remove the `pymp-*` folders that multiprocessing left in the temp folder when a process
    of ours was killed (it removes them only at a clean exit); returns them.

    A folder is a dead process's when it is ours and holds only sockets that no live process
    has bound (/proc/net/unix lists the bound ones); an empty one may be a live process's,
    just created, and is left alone.
    """
    try:
        table = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    bound = {fields[-1] for fields in map(str.split, table) if len(fields) >= 8}
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob("pymp-*"):
        try:
            entries = list(path.iterdir()) if path.stat().st_uid == os.getuid() else []
        except OSError:
            continue
        if entries and all(e.is_socket() and str(e) not in bound for e in entries):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed

"""Process identity: a pid with its start time, so that a reused pid is never taken for the
process that held it before. Workers watch their trainer, and temp files name their writer,
with it."""

from __future__ import annotations

import os
from pathlib import Path


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

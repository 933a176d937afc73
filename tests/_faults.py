"""What a run that fails must show (test_faults*.py, and every test of a refusal): exit 2
and one line naming the problem, no traceback; the snapshots it leaves; its processes gone. And
the private mount namespace the disk and /dev/shm cases run train.py in."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from _resume import NAME
from _train_helpers import alive


def one_line_error(result, *words):
    """The run failed with exit 2 and one line naming `words`, and no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0], (word, errors[0])


def one_line(error: pytest.ExceptionInfo) -> str:
    """The message of a caught error, asserted to be one line."""
    message = str(error.value)
    assert "\n" not in message
    return message


def cache(tmp_path: Path) -> Path:
    """Where the snapshots of `NAME` trained under `tmp_path` go."""
    return tmp_path / "cache" / "nnet" / NAME


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def wait_gone(pids: set[int], seconds: float) -> set[int]:
    """The processes of `pids` still alive after waiting up to `seconds` for them to end."""
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(pids)


def in_mount_namespace(mounts: str, cmd: list[str]) -> list[str]:
    """`cmd` run where `mounts` (shell mount commands) apply to it alone: a private mount
    namespace as an unprivileged user's root (`unshare -rm`)."""
    return ["unshare", "-rm", "sh", "-c", f"{mounts} && exec \"$@\"", "sh", *cmd]

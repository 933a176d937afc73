"""The in-process script runner (tests/_inproc.py) gives a process's status and output, and
puts back what the script changed for the whole test process."""

from __future__ import annotations

import logging
import os
import signal
import sys
import warnings

import torch
from _inproc import run_script

from core.utils import lock

SCRIPT = """
import logging, os, signal, sys, warnings
from pathlib import Path
import torch
from core.utils import lock
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
torch.set_num_threads(3)
torch.manual_seed(123)
os.environ["INPROC_TEST"] = "changed"
warnings.simplefilter("error")
logging.getLogger().addHandler(logging.NullHandler())
logging.getLogger().setLevel(logging.DEBUG)
if len(sys.argv) > 2:
    lock.acquire(Path(sys.argv[2]), print)
    print("locked", flush=True)
os.chdir("/")
print("out", sys.argv[1:], torch.get_num_threads(), os.environ.get("GIVEN"))
print("err line", file=sys.stderr)
mode = sys.argv[1]
if mode == "exit3":
    sys.exit(3)
if mode == "message":
    sys.exit("a message")
if mode == "raise":
    raise ValueError("boom")
"""


def _write(tmp_path):
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    return path


def test_status_and_output_are_those_of_a_process(tmp_path):
    path = _write(tmp_path)
    done = run_script(path, "plain", env={"GIVEN": "yes", "OMP_NUM_THREADS": "2"})
    assert done.returncode == 0
    assert done.stdout == "out ['plain'] 3 yes\n" and done.stderr == "err line\n"
    assert run_script(path, "exit3").returncode == 3
    message = run_script(path, "message")
    assert message.returncode == 1 and message.stderr.endswith("a message\n")
    raised = run_script(path, "raise")
    assert raised.returncode == 1 and "ValueError: boom" in raised.stderr


def test_process_wide_state_is_put_back(tmp_path):
    """By the commands' own list (core/engine/process.py KEPT): what a script changed for the
    whole process is as before, and the lock it took (released at a real process's exit) is
    gone."""
    path = _write(tmp_path)
    handler = signal.getsignal(signal.SIGUSR1)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    threads, cwd, argv = torch.get_num_threads(), os.getcwd(), list(sys.argv)
    filters = list(warnings.filters)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    done = run_script(path, "exit3", tmp_path)
    assert done.returncode == 3 and "locked" in done.stdout
    assert signal.getsignal(signal.SIGUSR1) == handler
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask
    assert torch.get_num_threads() == threads and os.getcwd() == cwd and sys.argv == argv
    assert "INPROC_TEST" not in os.environ
    assert torch.equal(torch.rand(3), expected)  # the script's manual_seed(123) is undone
    assert warnings.filters == filters
    assert root.handlers == handlers and root.level == level
    assert not (tmp_path / lock.NAME).exists() and lock.held() == []

"""The in-process script runner (tests/_inproc.py) gives a process's status and output, and
puts back what the script changed for the whole test process."""

from __future__ import annotations

import os
import signal
import sys

import torch
from _inproc import run_script

SCRIPT = """
import os, signal, sys
import torch
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
torch.set_num_threads(3)
torch.manual_seed(123)
os.environ["INPROC_TEST"] = "changed"
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
    path = _write(tmp_path)
    handler = signal.getsignal(signal.SIGUSR1)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    threads, cwd, argv = torch.get_num_threads(), os.getcwd(), list(sys.argv)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    run_script(path, "exit3")
    assert signal.getsignal(signal.SIGUSR1) == handler
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask
    assert torch.get_num_threads() == threads and os.getcwd() == cwd and sys.argv == argv
    assert "INPROC_TEST" not in os.environ
    assert torch.equal(torch.rand(3), expected)  # the script's manual_seed(123) is undone

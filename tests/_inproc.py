"""Run a script (train.py, test.py, demo.py, a tool, a bench script) in this process, as
`python <script>` would.

A real process pays a new interpreter's start on every run: torch and cv2 imported again, the
forkserver of the prefetch workers started again. That start, not the training, was nearly all
of the 7-13 s of each script test. `run_script` calls the script's command, its row's
`cornernet.commands.<module>.main(args, prog)` in the one table (core/utils/command_table.py),
or executes any other file (bench/) as `__main__`, with its own command line, environment and
working folder, and gives back what `subprocess.run(..., capture_output=True, text=True)` gives:
`returncode` (the command's status; for a file, from `sys.exit`, 0 when it returns, 1 for an
exception that escapes, as the interpreter would), `stdout` and `stderr`.

What the run changed for the whole process is put back by the commands' own list,
core/engine/process.py's `process_kept` (KEPT: signals, environment, working folder, argv,
logging, torch's threads and random states, the locks taken), around the run and the
set-up that makes this process look fresh to it.

What a process of its own still owns, and is still tested with one: signals sent from outside,
a killed or hung process, the exit of child processes with their parent, the launchers
(spawn, torchrun, srun) and anything a process's own start-up does. The prefetch workers are
real processes here too, forked from the one forkserver this test process keeps.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import runpy
import signal
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from core.engine.process import process_kept
from core.utils.command_table import COMMANDS

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Completed:
    """The result of one in-process run, as subprocess.CompletedProcess names it."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0


def _main(path: Path, args: list[str]) -> object:
    """An entry script's command `main` (its exit status), or any other file as `__main__`."""
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None
    modules = {row.script: row.module for row in COMMANDS}
    if name in modules:
        return importlib.import_module(f"cornernet.commands.{modules[name]}").main(args, prog=name)
    runpy.run_path(str(path), run_name="__main__")
    return 0


def _status(path: Path, args: list[str], stderr: io.StringIO) -> int:
    """The exit status of the run, as the interpreter gives it: `sys.exit(code)`'s (None 0, an
    int itself, anything else 1, printed), 1 for an escaping exception, 130 for Ctrl-C."""
    try:
        code = _main(path, args)
    except SystemExit as exit_:
        code = exit_.code
    except KeyboardInterrupt:
        traceback.print_exc(file=stderr)
        return 128 + signal.SIGINT
    except Exception:  # noqa: BLE001 - what the interpreter does with an escaping error
        traceback.print_exc(file=stderr)
        return 1
    if code is None or isinstance(code, int):
        return int(code or 0)
    print(code, file=stderr)
    return 1


def run_script(script: str | Path, *args: object, env: dict[str, str] | None = None,
               cwd: Path | None = None, threads: int | None = None) -> Completed:
    """`python <script> <args>` in this process; returns its status and output.

    Args:
        script: a path relative to the repository (`"train.py"`, `"tools/export.py"`) or
            absolute.
        env: variables set for the run (on top of this process's environment).
        cwd: the working folder (default: the repository, as the subprocess helpers use).
        threads: torch's thread count during the run; default `OMP_NUM_THREADS` of `env`,
            else 1: the script tests' processes ran with OMP_NUM_THREADS=1, and runs compared
            with each other must sum in the same order.
    """
    path = Path(script) if Path(script).is_absolute() else ROOT / script
    argv = [str(path), *map(str, args)]
    env = dict(env or {})
    # The scripts choose their threads from OMP_NUM_THREADS (core/utils/threads.py): say it.
    env["OMP_NUM_THREADS"] = str(threads or int(env.get("OMP_NUM_THREADS", "1")))
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    # The warning filters are the caller's (CALLER_OWNS: an import adds its own for good); a
    # fresh process starts with its own, so the harness scopes them to the run.
    with process_kept(), warnings.catch_warnings(), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        os.environ.update(env)
        os.chdir(cwd or ROOT)
        sys.argv[:] = argv
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        # Logging as a fresh process has it: no root handler (pytest's capture handler would
        # swallow the records), so a warning reaches logging's last resort, which writes to
        # the sys.stderr of the moment: the run's captured stderr.
        logging.getLogger().handlers[:] = []
        logging.getLogger().setLevel(logging.WARNING)
        status = _status(path, argv[1:], err)
    seconds = time.perf_counter() - start
    return Completed([sys.executable, *argv], status, out.getvalue(), err.getvalue(), seconds)

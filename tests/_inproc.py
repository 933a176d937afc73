"""Run a script (train.py, test.py, demo.py, a tool, a bench script) in this process, as
`python <script>` would.

A real process pays a new interpreter's start on every run: torch and cv2 imported again, the
forkserver of the prefetch workers started again. That start, not the training, was nearly all
of the 7-13 s of each script test. `run_script` calls the entry script's command,
`cornernet.commands.<name>.main(args, prog)` (what the script's few lines do), or executes any
other file (bench/) as `__main__`, with its own command line, environment and working folder,
and gives back what `subprocess.run(..., capture_output=True, text=True)` gives: `returncode`
(the command's status; for a file, from `sys.exit`, 0 when it returns, 1 for an exception that
escapes, as the interpreter would), `stdout` and `stderr`.

What a command's `run` gives back (core/engine/process.py's one list, `KEPT`: signal handlers
and mask, the environment, torch's threads, determinism and random states, numpy's and Python's
random states) is put back here too, with that list, for the files that are no command (bench/);
what the list leaves to the caller is put back here after every run: the working folder,
`sys.argv`, warning filters and root logging handlers, and the snapshot-folder locks (released at
exit in a real process).

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
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.engine.process import put_back, read_kept

ROOT = Path(__file__).resolve().parents[1]
# The checkout's entry scripts: each is `main` of a command module (cornernet/commands/), which
# the run calls directly; any other file (bench/) is executed as `__main__`.
COMMANDS = {"train.py": "train", "test.py": "test", "demo.py": "predict",
            "tools/export.py": "export", "tools/analyze_results.py": "analyze_results",
            "tools/analyze_model.py": "analyze_model", "tools/check_data.py": "check",
            "tools/convert.py": "convert", "tools/benchmark.py": "benchmark",
            "tools/submit.py": "submit", "tools/plot_metrics.py": "plot"}


@dataclass
class Completed:
    """The result of one in-process run, as subprocess.CompletedProcess names it."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = field(default=0.0)


def _status(code: object, stderr: io.StringIO) -> int:
    """The exit status `sys.exit(code)` gives a process: None 0, an int itself, else 1 with the
    object printed to stderr (as the interpreter does for `sys.exit("message")`)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


class _Saved:
    """The process-wide state a script may change, captured before and restored after it: the
    commands' list (`KEPT`) and what it leaves to the caller."""

    def __init__(self) -> None:
        self.kept = read_kept()
        self.cwd = os.getcwd()
        self.argv = list(sys.argv)
        self.log_handlers = list(logging.getLogger().handlers)
        self.log_level = logging.getLogger().level

    def restore(self) -> None:
        from core.utils import lock
        lock.release_all()  # a process releases its locks when it ends
        put_back(self.kept)
        os.chdir(self.cwd)
        sys.argv[:] = self.argv
        root = logging.getLogger()
        root.handlers[:] = self.log_handlers
        root.setLevel(self.log_level)


def _execute(path: Path, args: list[str]) -> int:
    """An entry script's command `main` (its exit status), or any other file as `__main__`."""
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None
    if name in COMMANDS:
        module = importlib.import_module(f"cornernet.commands.{COMMANDS[name]}")
        return module.main(args, prog=name)
    runpy.run_path(str(path), run_name="__main__")
    return 0


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
    saved = _Saved()
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    try:
        os.environ.update(env)
        os.chdir(cwd or ROOT)
        sys.argv[:] = argv
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        # Logging as a fresh process has it: no root handler (pytest's capture handler would
        # swallow the records), so a warning reaches logging's last resort, which writes to
        # the sys.stderr of the moment: the run's captured stderr.
        logging.getLogger().handlers[:] = []
        logging.getLogger().setLevel(logging.WARNING)
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            try:
                status = _execute(path, argv[1:])
            except SystemExit as exit_:
                status = _status(exit_.code, err)
            except KeyboardInterrupt:
                traceback.print_exc(file=err)
                status = 128 + signal.SIGINT
            except Exception:  # noqa: BLE001 - what the interpreter does with an escaping error
                traceback.print_exc(file=err)
                status = 1
    finally:
        saved.restore()
    seconds = time.perf_counter() - start
    return Completed([sys.executable, *argv], status, out.getvalue(), err.getvalue(), seconds)

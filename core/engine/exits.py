"""How every script ends: one table from an error to its exit status and message.

train.py, test.py, demo.py and tools/ all report through here, so the same mistake ends the same
way everywhere. The table decides by the error's kind (`core.errors`): it imports no error class
from above the ground floor, and `import core.engine.exits` (with its torch-free sibling `stop`)
costs no torch:

- 2, one line: a user's mistake (`UserMistake`: config, data, a missing file, storage set-up),
  and Python's own FileNotFoundError;
- 1: a failure at run time (`RunFailure`: a full disk mid-run, a diverging loss, a failed
  prefetch worker, a node that never came, a lost peer), its cause in the first line; any other
  exception is a bug: 1, with its traceback;
- 128 + signal when stopped by Ctrl-C or SIGTERM.
`CORNERNET_DEBUG=1` (or any true value: 1, true, yes, on) or `--debug` adds the traceback to
every error.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import RunFailure, Stopped, UserMistake
from ..utils.env import check_environment
from .process import process_kept
from .stop import StopRequest

USER_MISTAKES = (UserMistake, FileNotFoundError)
TRUE = ("1", "true", "yes", "on")


def debug_on(argv: list[str] | None = None) -> bool:
    """Whether errors carry their traceback: `--debug` in argv or CORNERNET_DEBUG true."""
    return "--debug" in (argv or []) or os.environ.get("CORNERNET_DEBUG", "").lower() in TRUE


def _trace(err: BaseException) -> str:
    return "".join(traceback.format_exception(type(err), err, err.__traceback__))


def _lost_peer(err: BaseException) -> bool:
    """torch.distributed's DistError (a collective whose peer went away), known by name: the
    table must not import torch to recognise it."""
    return any(cls.__name__ == "DistError" and cls.__module__.startswith("torch")
               for cls in type(err).__mro__)


def describe(err: BaseException) -> tuple[int, str]:
    """(exit status, message) for an error that ended a script; see the module docstring."""
    if isinstance(err, RunFailure):
        return err.exit_status, err.explain()
    if isinstance(err, USER_MISTAKES):
        return 2, " ".join(str(err).split())  # torch's multi-line messages, on one line
    if _lost_peer(err):
        first = str(err).splitlines()[0] if str(err) else ""
        return 1, (f"lost contact with another process of the run (it failed or was killed): "
                   f"{type(err).__name__}: {first}\n{_trace(err)}")
    if isinstance(err, OSError):
        return 1, str(err)
    return 1, f"{type(err).__name__}: {err}\n{_trace(err)}"


def with_trace(err: BaseException, text: str, argv: list[str] | None = None) -> str:
    """`text`, followed by the traceback when debugging is on and it holds none yet."""
    if debug_on(argv) and "Traceback" not in text:
        return f"{text}\n{_trace(err).rstrip()}"
    return text


def report(err: BaseException, argv: list[str] | None = None) -> int:
    """Print the error as the table says (on stderr); returns its exit status."""
    status, text = describe(err)
    print(f"error: {with_trace(err, text, argv)}", file=sys.stderr)
    return status


def exit_status(main: Callable[[], Any], on_stop: Callable[[Stopped], str] | None = None,
                argv: list[str] | None = None) -> int:
    """Run a command's work and return the exit status its outcome calls for (the table above);
    a SystemExit inside (argparse's usage error, --help) gives its status, as a process would.

    A stop signal ends it at once (`core.engine.stop`, the same rules as training's: a second
    Ctrl-C hurries, quietly); the signal handlers are the caller's again afterwards.

    Args:
        main: the command's work; its return value is ignored.
        on_stop: the line to print when stopped by a signal (what was kept, how to continue).
        argv: the command's arguments (for `--debug`); None: the process's command line
            (a script's `main()`), never an in-process caller's.
    """
    with process_kept():
        StopRequest(at_once=True)
        try:
            try:
                check_environment()  # a misspelt CORNERNET_* name or a wrong value, before any work
                main()
                return 0
            except Stopped as stop:
                print(f"stopped by {stop}" + (f": {on_stop(stop)}" if on_stop else ""),
                      file=sys.stderr)
                return 128 + stop.signum
            except Exception as err:  # noqa: BLE001 - every failure becomes a report
                return report(err, sys.argv[1:] if argv is None else argv)
            except SystemExit as done:  # argparse's usage errors and --help; an exit status
                return _status(done.code)
        except KeyboardInterrupt:  # the second Ctrl-C, wherever it lands: the user will not wait
            return 128 + signal.SIGINT


def _status(code: object) -> int:
    """The exit status `sys.exit(code)` gives a process: None 0, an int itself, else 1 with the
    object printed to stderr."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def run_cli(main: Callable[[], Any], on_stop: Callable[[Stopped], str] | None = None) -> None:
    """`exit_status` of `main`, then exit with it (a script's last line)."""
    sys.exit(exit_status(main, on_stop))

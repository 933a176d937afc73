"""How test.py and demo.py end: one line per mistake, exit codes, Ctrl-C and SIGTERM.

Exit 2 for usage, config and data mistakes, 1 for failures at run time, 130 / 143 when stopped
by Ctrl-C / SIGTERM. No traceback unless --debug or CORNERNET_DEBUG=1. A second Ctrl-C (or
SIGTERM) while the first is being handled ends the process at once, quietly.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from core.config import ConfigError
from core.dbs import DatasetError
from core.utils.images import ImageReadError

from .coco_eval import MissingEvaluator


class UsageError(Exception):
    """A mistake in the command line or the files it names; exit 2."""


class Stopped(BaseException):
    """Raised in the main thread by the first SIGINT or SIGTERM."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


USER_MISTAKES = (UsageError, ConfigError, DatasetError, MissingEvaluator, ImageReadError)


def _stop_handler(signum: int, _frame: Any) -> None:
    # The second signal: the first one's clean-up is taking too long for the user.
    signal.signal(signal.SIGINT, lambda *_: os._exit(128 + signal.SIGINT))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
    raise Stopped(signum)


def debug_requested(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("CORNERNET_DEBUG", "") not in ("", "0")


def run_cli(main: Callable[[], Any], on_stop: Callable[[Stopped], str] | None = None) -> None:
    """Run `main()` and exit with the code its outcome calls for (see the module docstring).

    Args:
        main: the script's work; its return value is ignored.
        on_stop: the line to print when stopped by a signal (what was kept, how to continue).
    """
    signal.signal(signal.SIGINT, _stop_handler)
    signal.signal(signal.SIGTERM, _stop_handler)
    show = debug_requested(sys.argv)
    try:
        main()
    except Stopped as stop:
        print(f"stopped by {stop}" + (f": {on_stop(stop)}" if on_stop else ""),
              file=sys.stderr)
        sys.exit(128 + stop.signum)
    except USER_MISTAKES as err:
        _fail(err, 2, show)
    except Exception as err:  # noqa: BLE001 - every failure becomes one line
        _fail(err, 1, show)


def _fail(err: BaseException, code: int, show: bool) -> None:
    if show:
        traceback.print_exc()
    message = str(err) if isinstance(err, (*USER_MISTAKES, OSError)) else \
        f"{type(err).__name__}: {err}"
    message = " ".join(message.split())  # torch's multi-line messages, on one line
    hint = "" if show else " (--debug or CORNERNET_DEBUG=1 shows the traceback)"
    print(f"error: {message}" + (hint if code == 1 else ""), file=sys.stderr)
    sys.exit(code)

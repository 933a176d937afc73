"""How every script ends: one table from an error to its exit status and message.

train.py, test.py, demo.py and tools/ all report through here, so the same mistake ends the same
way everywhere:

- 2, one line: a user's mistake, fixed by changing a file, a setting or the command line
  (config, data, a missing file, storage set-up: ConfigError, UsageError, DatasetError,
  ImageReadError, MissingEvaluator, FileNotFoundError, StorageError);
- 1: a failure at run time, its cause in the first line (a full disk mid-run, a diverging loss,
  a failed prefetch worker, a node that never came, a lost peer, a bug) with the traceback where the cause is not
  self-explanatory;
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

import torch.distributed as dist

from ..data.prefetch import WorkerError
from ..dbs import DatasetError
from ..errors import ConfigError, Stopped, UsageError
from ..inference.coco_eval import MissingEvaluator
from ..nnet.py_factory import NonFiniteLoss
from ..utils.files import DiskFull, StorageError
from ..utils.images import ImageReadError
from ..utils.rendezvous import RendezvousError

USER_MISTAKES = (ConfigError, UsageError, DatasetError, ImageReadError, MissingEvaluator,
                 FileNotFoundError, StorageError)
TRUE = ("1", "true", "yes", "on")


def debug_on(argv: list[str] | None = None) -> bool:
    """Whether errors carry their traceback: `--debug` in argv or CORNERNET_DEBUG true."""
    return "--debug" in (argv or []) or os.environ.get("CORNERNET_DEBUG", "").lower() in TRUE


def _trace(err: BaseException) -> str:
    return "".join(traceback.format_exception(type(err), err, err.__traceback__))


def describe(err: BaseException) -> tuple[int, str]:
    """(exit status, message) for an error that ended a script; see the module docstring."""
    if isinstance(err, DiskFull):  # a disk that fills mid-run is a failure of the run
        return 1, str(err)
    if isinstance(err, USER_MISTAKES):
        return 2, " ".join(str(err).split())  # torch's multi-line messages, on one line
    if isinstance(err, NonFiniteLoss) and hasattr(err, "skipped"):
        bad, recent = err.skipped
        return 1, (f"iteration {err.iteration}: {bad} of the last {recent} steps had a non-finite "
                   f"loss ({err}); the run is diverging, stopping. Lower system.learning_rate "
                   f"or resume from an earlier snapshot.")
    if isinstance(err, NonFiniteLoss):
        return 1, (f"iteration {getattr(err, 'iteration', '?')}: the loss is not finite ({err}); "
                   f"stopping. Lower system.learning_rate, check the data, or set "
                   f"system.nonfinite_loss to \"skip\".")
    if isinstance(err, WorkerError):
        return 1, f"training stopped: {err}"
    if isinstance(err, RendezvousError):  # names the missing node and what to run there
        return 1, str(err)
    if isinstance(err, dist.DistError):
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


def _stop_handler(signum: int, _frame: Any) -> None:
    # The second signal: the first one's clean-up is taking too long for the user.
    signal.signal(signal.SIGINT, lambda *_: os._exit(128 + signal.SIGINT))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
    raise Stopped(signum)


def run_cli(main: Callable[[], Any], on_stop: Callable[[Stopped], str] | None = None) -> None:
    """Run a script's `main()` and exit with the status its outcome calls for.

    Args:
        main: the script's work; its return value is ignored.
        on_stop: the line to print when stopped by a signal (what was kept, how to continue).
    """
    signal.signal(signal.SIGINT, _stop_handler)
    signal.signal(signal.SIGTERM, _stop_handler)
    try:
        main()
    except Stopped as stop:
        print(f"stopped by {stop}" + (f": {on_stop(stop)}" if on_stop else ""),
              file=sys.stderr)
        sys.exit(128 + stop.signum)
    except Exception as err:  # noqa: BLE001 - every failure becomes a report
        sys.exit(report(err, sys.argv))

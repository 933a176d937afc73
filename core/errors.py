"""The kinds of error, the errors every floor of core/ raises for a user's mistake, and name
lookups with a hint.

Every error class of core/ derives from one of two kinds, and its kind alone decides how it ends
a script (`core.engine.exits`, which therefore imports no error class from above this floor):

- `UserMistake`: fixed by changing a file, a setting or the command line; exit 2, one line;
- `RunFailure`: a failure at run time (a full disk mid-run, a diverging loss, a dead worker or
  peer); exit 1, its cause in the first line (`explain()`).

A third, `Stopped`, is not an error: a signal asked the run to stop (exit 128 + the signal).
This module imports nothing from core/, so any module may raise these without reaching upward.
"""

from __future__ import annotations

import difflib
import signal
from typing import Any


class UserMistake(Exception):
    """The kind of every error a user fixes (a file, a setting, the command line): exit 2, and
    the message alone, on one line, says what is wrong and what to do."""

    exit_status = 2


class RunFailure(Exception):
    """The kind of every failure at run time: exit 1; `explain()` is the report, its cause in
    the first line."""

    exit_status = 1

    def explain(self) -> str:
        return str(self)


class ConfigError(UserMistake, ValueError):
    """A config file or value is wrong; the message says where and what to do."""


class UsageError(UserMistake):
    """A mistake in the command line or in the files it names."""


class Stopped(BaseException):
    """A stop was requested by a signal; raised where the waiting or the work is cut short.

    `signum` is the signal (0 when the request came from a peer rank through `agree`).
    """

    def __init__(self, signum: int = 0) -> None:
        super().__init__(signal.Signals(signum).name if signum else "stop requested")
        self.signum = signum


def closest(key: str, valid: list[str] | tuple[str, ...]) -> str:
    """A hint naming the closest valid name, or listing them all when nothing is close."""
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    if match:
        return f"did you mean '{match[0]}'?"
    return "valid: " + ", ".join(sorted(valid))


def lookup(registry: dict[str, Any], name: str, what: str) -> Any:
    """`registry[name]`, or a ConfigError that lists the valid names."""
    if name not in registry:
        raise ConfigError(
            f"unknown {what} '{name}'; valid {what} names: {', '.join(sorted(registry))}"
        )
    return registry[name]

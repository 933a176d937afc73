"""The errors every floor of core/ raises for a user's mistake, and name lookups with a hint.

This module imports nothing from core/, so any module may raise these without reaching upward.
How each error ends a script (exit status, one line or a traceback) is decided in one place,
`core.engine.cli`.
"""

from __future__ import annotations

import difflib
import signal
from typing import Any


class ConfigError(ValueError):
    """A config file or value is wrong; the message says where and what to do."""


class UsageError(Exception):
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

"""The project's environment variables, read by one parser with the config's rules.

Every `CORNERNET_*` variable the code reads is declared in `VARIABLES` with its kind, default
and meaning; `setting(name)` is how the code reads one, and `check_environment()` reads them all
at start (every command, through `core.engine.exits.run_cli`, and train.py's launcher again
before any process or thread), so a value that cannot be right (`CORNERNET_HEARTBEAT_S=abc`,
`-1`, `nan`) is one line naming the variable before anything runs, never a traceback in a watch
thread or a false "rank 0 stopped answering" later. An unknown `CORNERNET_*` name close to a
known one (a typo: TRACKER for TRACKERS) is refused the same way: it would be ignored without a
word. Every name the code, the benchmarks and the tests read is declared here (a test reads the
sources to keep it so); other `CORNERNET_*` names, far from all of them, are left alone.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError

PREFIX = "CORNERNET_"
TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Variable:
    kind: str  # "seconds" (a finite number > 0), "flag" (TRUE or FALSE words) or "text"
    default: float | bool | str
    meaning: str


VARIABLES = {
    "CORNERNET_HEARTBEAT_S": Variable(
        "seconds", 60.0, "how long a rank may stop answering before its peers stop the run"),
    "CORNERNET_RENDEZVOUS_S": Variable(
        "seconds", 600.0, "how long the ranks of a run wait for each other at start"),
    "CORNERNET_DEBUG": Variable("flag", False, "tracebacks with every error"),
    "CORNERNET_TRACKERS": Variable(
        "text", "", "trackers to turn on besides system.trackers, e.g. mlflow,wandb"),
    "CORNERNET_DATA": Variable(
        "text", "", "the folder holding data/coco128 and reference/ (tests and benchmarks)"),
    "CORNERNET_EXPORT_ALL": Variable(
        "text", "", "1: the tests export every config, not only CornerNet_Tiny"),
}


def _parse(name: str, text: str) -> float | bool | str:
    variable = VARIABLES[name]
    if variable.kind == "text":
        return text
    if variable.kind == "flag":
        if text.strip().lower() in TRUE + FALSE:
            return text.strip().lower() in TRUE
        raise ConfigError(f"{name}={text!r}: expected one of {', '.join(TRUE)} (on) or "
                          f"{', '.join(repr(word) for word in FALSE)} (off) ({variable.meaning})")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name}={text!r}: expected a number of seconds greater than 0 "
                          f"({variable.meaning}; default {variable.default:g}); set it to one or "
                          f"unset it")
    return value


def setting(name: str, env: Mapping[str, str] | None = None) -> float | bool | str:
    """The value of variable `name` (declared in VARIABLES): its default when unset, a
    ConfigError naming it when its text cannot be right."""
    env = os.environ if env is None else env
    text = env.get(name)
    return VARIABLES[name].default if text is None else _parse(name, text)


def check_environment(env: Mapping[str, str] | None = None) -> dict[str, float | bool | str]:
    """Every declared variable, parsed; the first wrong value or near-miss name is a
    ConfigError (one line)."""
    env = os.environ if env is None else env
    for name in sorted(key for key in env if key.startswith(PREFIX) and key not in VARIABLES):
        near = difflib.get_close_matches(name.removeprefix(PREFIX),
                                         [known.removeprefix(PREFIX) for known in VARIABLES],
                                         n=1, cutoff=0.75)
        if near:
            raise ConfigError(f"{name} is not a setting of this project; did you mean "
                              f"{PREFIX}{near[0]}? "
                              f"(known: {', '.join(sorted(VARIABLES))})")
    return {name: setting(name, env) for name in VARIABLES}

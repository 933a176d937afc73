"""Command-line settings of the scripts: `--set KEY=VALUE ...` (settings changed from the command
line, checked like the JSON) and the snapshot argument `--testiter N|best`.

`system.batch_size=8 db.input_size=[255,255] max_iter=2`: a key is `<section>.<key>`, or a bare
key that only one section has. The value is read as JSON (numbers, true/false, null, lists) and
taken as text when it is not JSON (`system.opt_algo=sgd`). An unknown key is a ConfigError naming
the closest valid one; types and values are then checked by the same schema and rules as a
config file, with "--set" as the place named. The changed settings are part of the resolved
config, so a snapshot records them like any other setting.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from ..errors import ConfigError, UsageError, closest

SECTIONS = ("system", "db")


def add_set_arg(parser: argparse.ArgumentParser) -> None:
    """--set, as train.py, test.py and demo.py take it."""
    parser.add_argument("--set", dest="overrides", nargs="+", default=None, metavar="KEY=VALUE",
                        help="change settings of the config, e.g. --set system.max_iter=2 "
                             "db.input_size=[255,255] (a JSON value, or text)")


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_overrides(items: list[str] | None, schemas: dict[str, dict]) -> dict[str, dict]:
    """{"system": {...}, "db": {...}} of `items` ("KEY=VALUE"); keys must be in `schemas`
    ({section: {key: ...}}), which is how a typo is found before anything runs."""
    if isinstance(items, str) or not all(isinstance(item, str) for item in items or []):
        raise UsageError(f"overrides {items!r}: expected a list of 'KEY=VALUE' texts, as "
                          "--set takes them, e.g. ['db.test_scales=[0.5]']")
    found: dict[str, dict] = {section: {} for section in SECTIONS}
    valid = [f"{section}.{key}" for section in SECTIONS for key in schemas[section]]
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item}: expected KEY=VALUE, e.g. system.max_iter=2")
        section, dot, name = key.partition(".")
        if not dot:  # a bare key: the section that has it
            section, name = next(((s, key) for s in SECTIONS if key in schemas[s]), ("", key))
        if section not in SECTIONS or name not in schemas[section]:
            raise ConfigError(f"--set {item}: unknown key {key}; {closest(key, valid)}")
        found[section][name] = _value(text)
    return found


# What every --testiter's help says of its default (core.nnet.checkpoint.default_snapshot).
DEFAULT_SNAPSHOT = ("default: the final snapshot of the config's last training, the max_iter "
                    "its run folder's config.json records, else system.max_iter")


def snapshot_or_file_arg(text: str) -> int | str | Path:
    """--testiter of test and export: `snapshot_arg`'s values, or the path of a snapshot file
    (`.pkl`), as `cornernet predict --snapshot` takes one (`checkpoint.snapshot_label`)."""
    if text.endswith(".pkl"):
        return Path(text)
    return snapshot_arg(text)


def snapshot_arg(text: str) -> int | str:
    """--testiter of test.py, demo.py and export: an iteration number, 'best', or
    'best.aside<k>' (a best snapshot that a later run moved aside)."""
    if re.fullmatch(r"best(\.aside\d+)?", text):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an iteration number or 'best', got "
                                         f"{text!r}") from None

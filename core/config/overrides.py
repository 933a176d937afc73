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

import json
import re
from pathlib import Path
from typing import Any

from ..errors import ConfigError, UsageError, closest

SECTIONS = ("system", "db")


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def setting(text: str) -> tuple[str, Any]:
    """One --set item, "KEY=VALUE", as the (key, value) pair the options hold: the value read as
    JSON, else the text itself (`system.opt_algo=sgd`)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{text}: expected KEY=VALUE, e.g. system.max_iter=2")
    return key, _value(value)


def _pair(item: object) -> tuple[str, Any]:
    """An override as (key, value): a "KEY=VALUE" text (--set) or a (key, value) pair (the
    options' form, the API's keywords); a key may name its section with "." or "__"."""
    if isinstance(item, str):
        try:
            return setting(item)
        except ValueError as err:
            raise ConfigError(f"--set {err}") from None
    if (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)
            and item[0]):
        return item[0].replace("__", "."), item[1]
    raise UsageError(f"override {item!r}: expected 'KEY=VALUE' or a (key, value) pair, e.g. "
                     f"('db.test_scales', [0.5])")


def shown(key: str, value: Any) -> str:
    """An override as --set writes it (messages name the setting the user gave)."""
    return f"{key}={value if isinstance(value, str) else json.dumps(value)}"


def parse_overrides(items: Any, schemas: dict[str, dict]) -> dict[str, dict]:
    """{"system": {...}, "db": {...}} of `items` ("KEY=VALUE" texts or (key, value) pairs, or a
    {key: value} mapping); keys must be in `schemas` ({section: {key: ...}}), which is how a
    typo is found before anything runs."""
    if isinstance(items, dict):
        items = list(items.items())
    if isinstance(items, str) or not isinstance(items, (list, tuple, type(None))):
        raise UsageError(f"overrides {items!r}: expected a list of 'KEY=VALUE' texts, as "
                          "--set takes them, e.g. ['db.test_scales=[0.5]'], or of (key, value) "
                          "pairs")
    found: dict[str, dict] = {section: {} for section in SECTIONS}
    valid = [f"{section}.{key}" for section in SECTIONS for key in schemas[section]]
    for raw in items or []:
        key, value = _pair(raw)
        item = shown(key, value)
        section, dot, name = key.partition(".")
        if not dot:  # a bare key: the section that has it
            section, name = next(((s, key) for s in SECTIONS if key in schemas[s]), ("", key))
        if section not in SECTIONS or name not in schemas[section]:
            raise ConfigError(f"--set {item}: unknown key {key}; {closest(key, valid)}")
        found[section][name] = value
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
        raise ValueError(f"expected an iteration number or 'best', got {text!r}") from None

"""The part of YAML that a `data.yaml` of Ultralytics holds, read without PyYAML.

A data.yaml is a flat map: `key: scalar`, `key: [flow, list]`, `key: {0: a, 1: b}`, or a key
followed by an indented block of `- item` lines or `k: v` lines (names as a list or an index
map), and block scalars (`download: |` scripts), kept as text. Comments and quotes as in YAML.
Anything else is an error naming the file and line; a key whose block cannot be read is an
error only when it is used (`Unreadable`), so an exotic key that no reader needs never stops a
run.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import UserMistake

_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")


class YamlError(UserMistake, ValueError):
    """A data.yaml this reader cannot take (a user's mistake); the message names the file and
    line."""


class Unreadable:
    """A value in a form this reader does not take; `.why` names the file and line."""

    def __init__(self, why: str) -> None:
        self.why = why


def _strip_comment(line: str) -> str:
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _split_flow(body: str, where: str) -> list[str]:
    """Split the inside of [..] or {..} at top-level commas, quotes respected."""
    items, current, quote = [], "", None
    for char in body:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[]{}":
            raise YamlError(f"{where}: nested brackets are not read here; write one item per "
                            f"line instead")
        elif char == ",":
            items.append(current.strip())
            current = ""
            continue
        current += char
    if quote:
        raise YamlError(f"{where}: a quote is not closed")
    if current.strip():
        items.append(current.strip())
    return items


_NULLS = ("", "~", "null", "Null", "NULL")
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False,
          "FALSE": False}


def scalar(text: str, where: str) -> Any:
    """A YAML scalar or flow collection."""
    text = text.strip()
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if text[0] in "\"'":
        return _quoted(text, where)
    if text[0] in "[{":
        return _flow(text, where)
    return _plain(text, where)


def _quoted(text: str, where: str) -> str:
    """A double-quoted text (JSON's escapes) or a single-quoted one ('' is a quote)."""
    if text[0] == '"':
        try:
            value = json.loads(text)
        except ValueError:
            raise YamlError(f"{where}: cannot read the double-quoted text {text}") from None
        return value
    if len(text) < 2 or text[-1] != "'":
        raise YamlError(f"{where}: a quote is not closed: {text}")
    return text[1:-1].replace("''", "'")


def _flow(text: str, where: str) -> list | dict:
    """A '[...]' list or a '{...}' map on one line."""
    if text[0] == "[":
        if text[-1] != "]":
            raise YamlError(f"{where}: a '[' list must close on the same line")
        return [scalar(item, where) for item in _split_flow(text[1:-1], where)]
    if text[-1] != "}":
        raise YamlError(f"{where}: a '{{' map must close on the same line")
    return dict(_pair(item, where) for item in _split_flow(text[1:-1], where))


def _plain(text: str, where: str) -> int | float | str:
    """An integer, a float, or plain text (not one of the YAML features not read here)."""
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if text[0] in "&*!|>%@`":
        raise YamlError(f"{where}: '{text[0]}' (anchors, tags, block text) is not read here")
    return text


def _pair(text: str, where: str) -> tuple[Any, Any]:
    key, sep, value = text.partition(":")
    if not sep or not key.strip():
        raise YamlError(f"{where}: expected 'key: value', got {text!r}")
    return scalar(key, where), scalar(value, where)


def parse(text: str, path: str) -> dict[str, Any]:
    """The top-level map of `text` (the file `path`, named in errors)."""
    lines = text.splitlines()
    out: dict[str, Any] = {}
    i = 0
    while i < len(lines):
        where = f"{path}:{i + 1}"
        line = _strip_comment(lines[i])
        i += 1
        if not line.strip() or line.strip() in ("---", "...") or line.startswith("%"):
            continue
        if line[0] in " \t":
            raise YamlError(f"{where}: indented line outside a block: {line.strip()!r}")
        key, sep, rest = line.partition(":")
        if not sep or not key.strip():
            raise YamlError(f"{where}: expected 'key: value' at the top level, got {line!r}")
        key = str(scalar(key, where))
        block_start = i
        while i < len(lines) and (not lines[i].strip() or lines[i][0] in " \t"
                                  or (lines[i].startswith("-") and not rest.strip())):
            i += 1
        block = [(n, _strip_comment(lines[n])) for n in range(block_start, i)]
        block = [(n, b) for n, b in block if b.strip()]
        rest = rest.strip()
        if rest[:1] in ("|", ">"):
            out[key] = "\n".join(b for _, b in block)
        elif rest:
            if block:
                raise YamlError(f"{path}:{block[0][0] + 1}: '{key}' has a value on its own "
                                f"line and an indented block below it")
            out[key] = scalar(rest, where)
        else:
            out[key] = _block(block, path) if block else None
    return out


def _block(block: list[tuple[int, str]], path: str) -> Any:
    """An indented block of `- item` lines (a list) or `k: v` lines (a map) of scalars."""
    indents = {len(b) - len(b.lstrip()) for _, b in block}
    first = f"{path}:{block[0][0] + 1}"
    if len(indents) != 1:
        return Unreadable(f"{first}: a nested block is not read here; write one scalar per line")
    try:
        if all(b.strip().startswith("- ") or b.strip() == "-" for _, b in block):
            return [scalar(b.strip()[1:], f"{path}:{n + 1}") for n, b in block]
        return dict(_pair(b, f"{path}:{n + 1}") for n, b in block)
    except YamlError as err:
        return Unreadable(str(err))

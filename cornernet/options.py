"""A command's parser, built from its options class (core/utils/options.py), and the value back.

    parser = parser_for(TestOptions, "cornernet test", "Evaluate a snapshot")
    options = parse(TestOptions, argv, "cornernet test", "Evaluate a snapshot")

Each field declared with `option(...)` becomes one argument: its flags, help, choices and
default from the declaration, its text read by the field's `parse` function. A ValueError from
that function, or a `UsageError` from the options' own checks (`__post_init__`), is argparse's
usage error: the usage line, the message, exit status 2, as a typo always was. The parsed
namespace never leaves this module: `parse` returns the frozen options value.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from core.utils.options import MISSING, Cli, cli_of

T = TypeVar("T")


def _reader(field: dataclasses.Field, cli: Cli) -> Callable[[str], Any] | None:
    """The field's text-to-value function, its ValueError shown as the user's message."""
    if cli.parse is None:
        return None
    if cli.parse in (int, float):  # argparse's own words: "invalid int value: 'x'"
        return cli.parse
    parse = cli.parse

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err) or f"bad value {text!r}") from None

    read.__name__ = field.name  # argparse names a type that failed without a message by this
    return read


def _default(field: dataclasses.Field) -> Any:
    if field.default is not MISSING:
        return field.default
    if field.default_factory is not MISSING:
        return field.default_factory()
    return None


def _switch(field: dataclasses.Field, cli: Cli) -> bool:
    return field.default is False and cli.parse is None and cli.nargs is None


def _add(parser: argparse.ArgumentParser, field: dataclasses.Field, cli: Cli) -> None:
    kwargs: dict[str, Any] = {"help": argparse.SUPPRESS if cli.hidden else cli.help}
    if not cli.flags:  # positional
        if field.default is not MISSING or field.default_factory is not MISSING:
            kwargs["nargs"] = cli.nargs or "?"
            kwargs["default"] = _default(field)
        elif cli.nargs is not None:
            kwargs["nargs"] = cli.nargs
        kwargs.update({"type": _reader(field, cli), "choices": cli.choices,
                       "metavar": cli.metavar})
        parser.add_argument(field.name, **{k: v for k, v in kwargs.items() if v is not None})
        return
    kwargs["dest"] = field.name
    kwargs["default"] = _default(field)
    if cli.negatable:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif _switch(field, cli):
        kwargs["action"] = "store_true"
    else:
        kwargs.update({"type": _reader(field, cli), "choices": cli.choices,
                       "metavar": cli.metavar, "nargs": cli.nargs, "const": cli.const})
    parser.add_argument(*cli.flags, **{k: v for k, v in kwargs.items()
                                       if v is not None or k == "default"})


def parser_for(cls: type, prog: str, description: str | None = None,
               parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The parser of the options class `cls`: one argument per field declared with `option`
    (fields without a command-line form are left to their defaults). `parser`: add to this one
    (a subcommand's) instead of a new one."""
    parser = parser or argparse.ArgumentParser(prog=prog, description=description)
    for field in dataclasses.fields(cls):
        cli = cli_of(field)
        if cli is not None:
            _add(parser, field, cli)
    return parser


def value_of(cls: type[T], parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> T:
    """The options value of a parsed namespace; a UsageError of the options' checks is the
    parser's usage error (exit 2)."""
    from core.errors import UsageError

    values = {}
    for field in dataclasses.fields(cls):
        if field.init and hasattr(namespace, field.name):
            value = getattr(namespace, field.name)
            cli = cli_of(field)
            if isinstance(value, list) and cli is not None and cli.nargs is not None:
                value = tuple(value)
            values[field.name] = value
    try:
        return cls(**values)
    except UsageError as err:
        parser.error(str(err))
        raise  # parser.error exits; for the type checker


def parse(cls: type[T], argv: Sequence[str] | None, prog: str,
          description: str | None = None) -> T:
    """`argv` (default: the command line) read into a frozen `cls`."""
    parser = parser_for(cls, prog, description)
    return value_of(cls, parser, parser.parse_args(None if argv is None else list(argv)))

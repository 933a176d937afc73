"""A command's parser, built from its options class (core/utils/options.py), and the value back.

    parser = parser_for(TestOptions, "cornernet test", "Evaluate a snapshot")
    options = parse(TestOptions, argv, "cornernet test", "Evaluate a snapshot")
    options = parse_one_of({"yolo2coco": (YoloToCoco, "a YOLO split to COCO"), ...}, argv,
                           "cornernet convert", "Convert labels")   # subcommands

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

from core.utils.options import MISSING, Cli, cli_of, default_of

T = TypeVar("T")


def _reader(field: dataclasses.Field, cli: Cli) -> Callable[[str], Any] | None:
    """The field's text-to-value function, its ValueError shown as the user's message."""
    if cli.parse is None:
        return None
    if isinstance(cli.parse, type):  # int, float, Path: argparse's own "invalid int value: 'x'"
        return cli.parse
    parse = cli.parse

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err) or f"bad value {text!r}") from None

    read.__name__ = field.name  # argparse names a type that failed without a message by this
    return read


def _switch(field: dataclasses.Field, cli: Cli) -> bool:
    return field.default is False and cli.parse is None and cli.nargs is None


def _now(value: Any) -> Any:
    """A help text or choices given as a function (what a registry holds when the parser is
    built, e.g. the runtimes registered so far), called; any other value as it is."""
    return value() if callable(value) else value


def _add(parser: argparse.ArgumentParser, field: dataclasses.Field, cli: Cli) -> None:
    cli = dataclasses.replace(cli, help=_now(cli.help), choices=_now(cli.choices))
    kwargs: dict[str, Any] = {"help": cli.help}
    if not cli.flags:  # positional
        if default_of(field) is not MISSING:
            kwargs["nargs"] = cli.nargs or "?"
            kwargs["default"] = default_of(field)
        elif cli.nargs is not None:
            kwargs["nargs"] = cli.nargs
        kwargs.update({"type": _reader(field, cli), "choices": cli.choices,
                       "metavar": cli.metavar})
        parser.add_argument(field.name, **{k: v for k, v in kwargs.items() if v is not None})
        return
    kwargs["dest"] = field.name
    if default_of(field) is MISSING:
        kwargs["required"] = True  # a flag the value cannot do without (predict's --images)
    else:
        kwargs["default"] = default_of(field)
    if cli.negatable:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif cli.repeat:  # None when not given: the field keeps its default
        kwargs.update({"action": "append", "default": None, "type": _reader(field, cli),
                       "choices": cli.choices, "metavar": cli.metavar})
    elif _switch(field, cli):
        kwargs["action"] = "store_true"
    else:
        kwargs.update({"type": _reader(field, cli), "choices": cli.choices,
                       "metavar": cli.metavar, "nargs": cli.nargs})
    parser.add_argument(*cli.flags, **{k: v for k, v in kwargs.items()
                                       if v is not None or k == "default"})


def parser_for(cls: type, prog: str, description: str | None = None,
               parser: argparse.ArgumentParser | None = None,
               epilog: str | None = None) -> argparse.ArgumentParser:
    """The parser of the options class `cls`: one argument per field declared with `option`
    (fields without a command-line form are left to their defaults). `parser`: add to this one
    (a subcommand's) instead of a new one; `epilog`: help's last line."""
    parser = parser or argparse.ArgumentParser(prog=prog, description=description, epilog=epilog)
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
            if cli is not None and cli.repeat and value is None:
                continue  # a repeatable flag not given: the declared default
            if isinstance(value, list) and cli is not None and (cli.nargs is not None
                                                                 or cli.repeat):
                value = tuple(value)
            values[field.name] = value
    try:
        return cls(**values)
    except UsageError as err:
        parser.error(str(err))
        raise  # parser.error exits; for the type checker


def parse(cls: type[T], argv: Sequence[str] | None, prog: str,
          description: str | None = None, epilog: str | None = None) -> T:
    """`argv` (default: the command line) read into a frozen `cls`."""
    parser = parser_for(cls, prog, description, epilog=epilog)
    return value_of(cls, parser, parser.parse_args(None if argv is None else list(argv)))


def parse_one_of(commands: dict[str, tuple[type, str | None]], argv: Sequence[str] | None,
                 prog: str, description: str | None = None) -> Any:
    """`argv` (default: the command line) read as one of subcommands: {word: (options class,
    help)}; returns the value of the class whose word comes first (`cornernet convert
    yolo2coco ...`). A subcommand's usage errors show that subcommand's usage."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    words = parser.add_subparsers(dest="command", required=True)
    parsers = {word: parser_for(cls, f"{prog} {word}", parser=words.add_parser(word, help=help))
               for word, (cls, help) in commands.items()}
    namespace = parser.parse_args(None if argv is None else list(argv))
    word = namespace.command
    return value_of(commands[word][0], parsers[word], namespace)

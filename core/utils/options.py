"""Options declared once: a frozen dataclass whose fields say how the command line writes them.

A command's options are a value. Each field is declared with `option(...)`: its default, and the
flag, help and text-to-value function its command line uses. The command line's parser is built
from those fields (cornernet/options.py), and the API builds the same value with keywords, so
a default is written in one place and no argv or JSON string stands between the API and the work:

    @dataclass(frozen=True, kw_only=True)
    class TestOptions(ConfigOptions):
        images: int | None = option(None, "--images", parse=int, help="the first N images")

A `parse` function takes the command line's text and returns the value, raising ValueError with
a message for the user on bad text (the parser shows that message as argparse's usage error).
Checks that involve the whole value (at least 1, two options that exclude each other) belong in
the dataclass's `__post_init__`, raising `core.errors.UsageError`, so that the API's keywords
are held to them too. Nothing here imports argparse: core names no command-line type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

MISSING = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Cli:
    """How the command line writes one field.

    Attributes:
        flags: the option strings ("--workers"); empty for a positional argument.
        help: the help text (may hold argparse's %(default)s); or a function returning it,
            called when the parser is built (a text that lists a registry).
        parse: text -> value (raises ValueError on bad text); None: the text itself.
        choices: the accepted values, when a fixed few; or a function returning them, called
            when the parser is built (the names a registry holds then).
        metavar: the placeholder shown in usage (a tuple: one per value of a count `nargs`).
        nargs: argparse's nargs ("+", "*", "?", or a count); a list becomes a tuple.
        repeat: the flag may be given more than once (`--slurm a=1 --slurm b=2`); its values
            are gathered, in order, into a tuple.
        negatable: a bool option that also takes --no-<flag> (argparse's BooleanOptionalAction).
    """

    flags: tuple[str, ...] = ()
    help: str | Callable[[], str] | None = None
    parse: Callable[[str], Any] | None = None
    choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None
    metavar: str | tuple[str, ...] | None = None
    nargs: int | str | None = None
    repeat: bool = False
    negatable: bool = False


def option(default: Any = MISSING, *flags: str, help: str | Callable[[], str] | None = None,
           parse: Callable[[str], Any] | None = None,
           choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
           metavar: str | tuple[str, ...] | None = None, nargs: int | str | None = None,
           repeat: bool = False, negatable: bool = False,
           factory: Callable[[], Any] | None = None) -> Any:
    """A dataclass field with its command-line form. No `flags`: a positional argument (with
    `default` MISSING, a required one); flags with `default` MISSING: a flag that must be
    given (`--images` of predict). A bool field with default False and no `parse` is a
    switch (`--initialize`); `negatable` adds `--no-<flag>`; `repeat` gathers a flag given
    several times into a tuple. `factory` in place of `default` for a mutable default."""
    cli = Cli(flags=tuple(flags), help=help, parse=parse, choices=choices, metavar=metavar,
              nargs=nargs, repeat=repeat, negatable=negatable)
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"cli": cli})
    return dataclasses.field(default=default, metadata={"cli": cli})


def cli_of(field: dataclasses.Field) -> Cli | None:
    """The command-line form of a field, or None for a field the command line does not set."""
    return field.metadata.get("cli")


def default_of(field: dataclasses.Field) -> Any:
    """A field's default (its factory's value), or MISSING for a field that must be given."""
    if field.default is not MISSING:
        return field.default
    if field.default_factory is not MISSING:
        return field.default_factory()
    return MISSING


def defaults(cls: type) -> dict[str, Any]:
    """{field name: default} of an options class (fields without a default left out): what the
    command line and the API both start from."""
    return {field.name: default_of(field) for field in dataclasses.fields(cls)
            if default_of(field) is not MISSING}


def split_keywords(cls: type, keywords: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the keywords that are fields of `cls`, the rest): how the API tells an option
    (`workers=1`) from a setting of the config (`max_iter=20`)."""
    names = {field.name for field in dataclasses.fields(cls)}
    return ({key: value for key, value in keywords.items() if key in names},
            {key: value for key, value in keywords.items() if key not in names})


def check_choices(options: Any) -> None:
    """Hold a value built by keywords to the choices its command line offers (argparse checks
    them there): a UsageError naming the field and the valid values."""
    from ..errors import UsageError

    for field in dataclasses.fields(options):
        cli = cli_of(field)
        if cli is None or cli.choices is None:
            continue
        valid = tuple(cli.choices() if callable(cli.choices) else cli.choices)
        value = getattr(options, field.name)
        values = value if isinstance(value, (tuple, list)) and cli.nargs is not None else (value,)
        wrong = [item for item in values if item is not None and item not in valid]
        if wrong:
            raise UsageError(f"{field.name}={wrong[0]!r}: expected one of "
                             f"{', '.join(map(str, valid))}")

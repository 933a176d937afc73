"""Options declared once (core/utils/options.py, core/config/options.py): the parser built from
the dataclass (cornernet/options.py) reads the command line into the same value the API builds
with keywords."""

import dataclasses

import pytest

from core.config import load_config
from core.config.options import ConfigOptions, DebugOptions, DeviceOptions, SnapshotOptions
from core.errors import UsageError
from core.utils.options import defaults, option, split_keywords
from cornernet.options import parse, parse_one_of


@dataclasses.dataclass(frozen=True, kw_only=True)
class Example(ConfigOptions, SnapshotOptions, DeviceOptions, DebugOptions):
    workers: int = option(4, "--workers", parse=int, help="prefetch processes")
    resume: bool = option(True, "--resume", negatable=True, help="continue")
    rows: tuple[str, ...] = option((), "--rows", nargs="+", help="rows")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.workers < 1:
            raise UsageError(f"--workers must be at least 1, got {self.workers}")


def test_the_command_line_and_keywords_give_one_value():
    argv = ["Cfg", "--set", "max_iter=2", "db.input_size=[255,255]", "system.opt_algo=sgd",
            "--testiter", "best", "--no-resume", "--rows", "a", "b", "--workers", "3"]
    parsed = parse(Example, argv, "example")
    built = Example(cfg_file="Cfg", overrides={"max_iter": 2, "db.input_size": [255, 255],
                                               "system.opt_algo": "sgd"},
                    testiter="best", resume=False, rows=("a", "b"), workers=3)
    assert parsed == built
    assert parsed.overrides == (("max_iter", 2), ("db.input_size", [255, 255]),
                                ("system.opt_algo", "sgd"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.workers = 1  # type: ignore[misc]


def test_defaults_are_the_declared_ones_on_both_sides():
    assert dataclasses.asdict(parse(Example, ["Cfg"], "example")) == \
        dataclasses.asdict(Example(cfg_file="Cfg"))
    assert defaults(Example)["workers"] == 4 and defaults(Example)["overrides"] == ()
    assert split_keywords(Example, {"workers": 1, "max_iter": 20}) == ({"workers": 1},
                                                                        {"max_iter": 20})


@pytest.mark.parametrize("argv, message", [
    (["Cfg", "--workers", "0"], "--workers must be at least 1, got 0"),
    (["Cfg", "--testiter", "soon"], ("argument --testiter: expected an iteration number or "
                                    "'best', got 'soon'")),
    (["Cfg", "--set", "max_iter"], "argument --set: max_iter: expected KEY=VALUE"),
])
def test_bad_text_is_a_usage_error_with_the_checks_message(argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        parse(Example, argv, "example")
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: example") and message in err


def test_the_keywords_are_held_to_the_same_checks():
    with pytest.raises(UsageError, match="--workers must be at least 1"):
        Example(cfg_file="Cfg", workers=0)


def test_overrides_as_pairs_change_the_config_as_set_texts_do():
    as_text = load_config("CornerNet_Tiny", overrides=["max_iter=7", "db.input_size=[255,255]"])
    as_pairs = load_config("CornerNet_Tiny", overrides=(("max_iter", 7),
                                                        ("db__input_size", [255, 255])))
    assert as_pairs[0].max_iter == as_text[0].max_iter == 7
    assert as_pairs[1]["input_size"] == as_text[1]["input_size"] == [255, 255]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Repeated(DebugOptions):
    extra: tuple[str, ...] = option((), "--extra", repeat=True, help="one more, again and again")


def test_a_repeatable_flag_gathers_its_values_in_order():
    assert parse(Repeated, ["--extra", "a=1", "--extra", "b=2"], "example").extra == ("a=1",
                                                                                      "b=2")
    assert parse(Repeated, [], "example") == Repeated()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Other(DebugOptions):
    out: str = option(help="where")
    count: int = option(1, "--count", parse=int, help="how many")

    def __post_init__(self) -> None:
        if self.count < 1:
            raise UsageError(f"--count must be at least 1, got {self.count}")


def test_subcommands_give_the_value_of_the_one_named(capsys):
    commands = {"one": (Repeated, "the first"), "other": (Other, "the second")}
    assert parse_one_of(commands, ["other", "x", "--count", "3"], "example") == Other(out="x",
                                                                                       count=3)
    assert parse_one_of(commands, ["one", "--debug"], "example") == Repeated(debug=True)
    with pytest.raises(SystemExit) as done:
        parse_one_of(commands, ["other", "x", "--count", "0"], "example")
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.startswith("usage: example other")
    assert "--count must be at least 1, got 0" in err
    with pytest.raises(SystemExit) as done:
        parse_one_of(commands, [], "example")
    assert done.value.code == 2
    assert "the following arguments are required: command" in capsys.readouterr().err


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timed(DebugOptions):
    hours: float = option(1.0, "--hours", parse=float, help="how long")


@pytest.mark.parametrize("cls, argv, message", [
    (Example, ["Cfg", "--workers", "four"], "argument --workers: invalid int value: 'four'"),
    (Timed, ["--hours", "soon"], "argument --hours: invalid float value: 'soon'"),
])
def test_a_number_that_is_no_number_is_said_in_argparse_s_words(cls, argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        parse(cls, argv, "example")
    assert done.value.code == 2 and message in capsys.readouterr().err


NAMES = ["a"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Registered(DebugOptions):
    name: str | None = option(None, "--name", choices=lambda: tuple(NAMES),
                              help=lambda: "one of " + ", ".join(NAMES))


def test_choices_and_help_given_as_functions_are_read_when_the_parser_is_built(capsys):
    NAMES.append("b")  # registered after the class was declared
    try:
        assert parse(Registered, ["--name", "b"], "example").name == "b"
        with pytest.raises(SystemExit):
            parse(Registered, ["--help"], "example")
        assert "one of a, b" in capsys.readouterr().out
        with pytest.raises(SystemExit):
            parse(Registered, ["--name", "c"], "example")
        assert "invalid choice: 'c'" in capsys.readouterr().err
    finally:
        NAMES.remove("b")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Required(DebugOptions):
    images: tuple[str, ...] = option(dataclasses.MISSING, "--images", "--source", nargs="+",
                                     help="inputs")


def test_a_flag_without_a_default_must_be_given(capsys):
    assert parse(Required, ["--source", "a.jpg", "b.jpg"], "example").images == ("a.jpg",
                                                                                 "b.jpg")
    with pytest.raises(SystemExit) as done:
        parse(Required, [], "example")
    assert done.value.code == 2
    assert "the following arguments are required: --images/--source" in capsys.readouterr().err


def test_a_type_as_parse_keeps_argparses_own_message(capsys):
    with pytest.raises(SystemExit):
        parse(Example, ["Cfg", "--workers", "many"], "example")
    assert "argument --workers: invalid int value: 'many'" in capsys.readouterr().err

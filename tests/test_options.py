"""Options declared once (core/utils/options.py, core/config/options.py): the parser built from
the dataclass (cornernet/options.py) reads the command line into the same value the API builds
with keywords."""

import dataclasses

import pytest

from core.config import load_config
from core.config.options import ConfigOptions, DebugOptions, DeviceOptions, SnapshotOptions
from core.errors import UsageError
from core.utils.options import defaults, option, split_keywords
from cornernet.options import parse


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
    (["Cfg", "--set", "max_iter"], "argument --set: --set max_iter: expected KEY=VALUE"),
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

"""Training's options declared once (core/engine/options.py): `cornernet train` reads its command
line into `TrainOptions`, and `cornernet.train(...)` builds the same value from its keywords,
with no argv, no --set text and no JSON in between, and the same defaults."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

import cornernet
import cornernet.options
from core.engine.options import TrainOptions
from core.errors import UsageError
from core.utils.options import defaults
from cornernet.commands import train as command


@pytest.fixture
def handed(monkeypatch):
    """The options `cornernet.train` hands to the command's `run` (which trains nothing here)."""
    seen: list[TrainOptions] = []

    def run(options, log=print):
        seen.append(options)
        return 0

    monkeypatch.setattr(command, "run", run)
    return seen


def test_every_default_of_train_is_the_same_on_the_command_line_and_in_the_api(handed):
    assert cornernet.train("CornerNet_Tiny").status == 0
    (built,) = handed
    parsed = command.parse_args(["CornerNet_Tiny"])
    assert dataclasses.asdict(built) == dataclasses.asdict(parsed)
    assert built == parsed == TrainOptions(cfg_file="CornerNet_Tiny")
    # one default each: the API's workers were 2 while the command line's were 4
    assert built.workers == defaults(TrainOptions)["workers"] == 4
    assert (built.start_iter, built.overrides, built.no_fit) == ("0", (), False)


def test_the_api_builds_the_options_with_no_argv_and_no_set_text(handed, monkeypatch, tmp_path):
    def no_parsing(*args, **kwargs):
        raise AssertionError("the API parsed a command line")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", no_parsing)
    monkeypatch.setattr(cornernet.options, "parse", no_parsing)
    monkeypatch.setattr(command, "parse_args", no_parsing)
    weights = tmp_path / "start.pkl"
    cornernet.train("CornerNet_Tiny", workers=1, device="cpu", resume=2, weights=weights,
                    config_dir=None, max_iter=20, db__input_size=[255, 255],
                    system__opt_algo="sgd")
    (built,) = handed
    assert built == TrainOptions(cfg_file="CornerNet_Tiny", workers=1, device="cpu",
                                 start_iter="2", weights=str(weights),
                                 overrides=(("max_iter", 20), ("db.input_size", [255, 255]),
                                            ("system.opt_algo", "sgd")))
    assert isinstance(built.overrides[1][1], list)  # the value itself, not its JSON text


def test_the_apis_data_keywords_are_the_data_options(handed, tmp_path):
    cornernet.train("CornerNet_Tiny", data=str(tmp_path / "hats"), name="hats", fit=False,
                    resume="latest")
    (built,) = handed
    assert built == command.parse_args(["CornerNet_Tiny", "--data", str(tmp_path / "hats"),
                                        "--name", "hats", "--no-fit", "--iter", "latest"])
    assert built.data == Path(tmp_path / "hats")


def test_the_options_hold_the_apis_iteration_to_the_command_lines_rule():
    assert TrainOptions(cfg_file="C", start_iter=7).start_iter == "7"
    with pytest.raises(UsageError, match="--iter: expected an iteration number or 'latest', "
                                         "got 'soon'"):
        TrainOptions(cfg_file="C", start_iter="soon")


def test_a_bad_iteration_on_the_command_line_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as done:
        command.parse_args(["CornerNet_Tiny", "--iter", "soon"])
    assert done.value.code == 2
    assert ("argument --iter: expected an iteration number or 'latest', got 'soon'"
            in capsys.readouterr().err)


def test_check_takes_data_name_and_no_fit_as_train_declares_them():
    from cornernet.commands import check

    args = check.parse_args(["CornerNet_Tiny", "--data", "x", "--name", "n", "--no-fit"])
    assert (args.data, args.name, args.no_fit) == (Path("x"), "n", True)


def test_requeue_false_from_the_api_turns_off_a_configs_requeue(monkeypatch):
    """`requeue` is an option and a config key: the keyword sets both, as `--set requeue=false`
    did before the options were values."""
    from core.config import load_config

    seen = []
    monkeypatch.setattr(command, "run", lambda options, log=print: seen.append(options) or 0)
    # a config whose system.requeue is true (here by overrides=), and the keyword saying no
    cornernet.train("CornerNet_Tiny", overrides={"requeue": True}, requeue=False,
                    stop_signal="TERM")
    options = seen[-1]
    assert options.requeue is False and options.stop_signal == "TERM"
    system_config, _ = load_config("CornerNet_Tiny", overrides=options.overrides)
    assert system_config.requeue is False and system_config.stop_signal == "TERM"

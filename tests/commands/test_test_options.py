"""test's and predict's options as values (cornernet/commands/test.py, predict.py): the command
line and `cornernet.evaluate` build the same frozen value, each default written once; the
checks hold for both; --debug is read through properties, never by changing the value."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import cornernet
from core.errors import UsageError
from core.utils.options import defaults
from cornernet.commands import predict, test
from cornernet.commands.predict import PredictOptions
from cornernet.commands.test import TestOptions


@pytest.fixture
def evaluated(monkeypatch):
    """The options `cornernet.evaluate` hands to the command's run (which does not run)."""
    built: list[TestOptions] = []

    def capture(options, log=print):
        built.append(options)
        return {"AP": 0.5}

    monkeypatch.setattr(test, "run", capture)
    return built


def test_every_default_of_test_is_one_on_the_command_line_and_in_the_api(evaluated):
    assert cornernet.evaluate("CornerNet_Tiny") == {"AP": 0.5}
    from_api = evaluated[0]
    from_argv = test.parse_args(["CornerNet_Tiny"])
    assert from_api == from_argv == TestOptions(cfg_file="CornerNet_Tiny")
    # each field, so that a default changed on one side only names itself
    for name, value in defaults(TestOptions).items():
        assert getattr(from_argv, name) == getattr(from_api, name) == value, name
    assert from_argv.split == "validation" and from_argv.backend == "faster"
    assert from_argv.vis_thresh == 0.3 and from_argv.resume and from_argv.overrides == ()


def test_the_api_keywords_are_the_command_lines_options_and_settings(evaluated):
    cornernet.evaluate("CornerNet_Tiny", "7", split="training", images=3, device="cpu",
                       backend="pycocotools", resume=False, raw_weights=True, max_iter=2,
                       db__top_k=5)
    argv = ["CornerNet_Tiny", "--testiter", "7", "--split", "training", "--images", "3",
            "--device", "cpu", "--backend", "pycocotools", "--no-resume", "--raw-weights",
            "--set", "max_iter=2", "db.top_k=5"]
    assert evaluated[0] == test.parse_args(argv)
    assert evaluated[0].testiter == 7  # "7" read as the command line reads it
    assert evaluated[0].overrides == (("max_iter", 2), ("db.top_k", 5))


def test_none_for_an_option_is_its_default_as_the_api_always_took_it(evaluated):
    cornernet.evaluate("CornerNet_Tiny", None, config_dir=None, backend=None, images=None)
    assert evaluated[0] == test.parse_args(["CornerNet_Tiny"])


def test_a_snapshot_file_given_to_the_api_is_the_command_lines_file(evaluated):
    cornernet.evaluate("CornerNet_Tiny", "cache/CornerNet_Tiny_2.pkl")
    assert evaluated[0].testiter == Path("cache/CornerNet_Tiny_2.pkl")
    with pytest.raises(UsageError, match="--testiter last: expected an iteration number"):
        cornernet.evaluate("CornerNet_Tiny", "last")


@pytest.mark.parametrize("keywords, message", [
    ({"images": 0}, "--images must be at least 1, got 0"),
    ({"batch": -2}, "--batch must be at least 1, got -2"),
    ({"debug_images": 0}, "--debug-images must be at least 1, got 0"),
    ({"vis": -1}, "--vis must be 0 or more, got -1"),
])
def test_the_checks_hold_for_the_api_and_the_command_line(keywords, message, capsys):
    with pytest.raises(UsageError, match=message):
        TestOptions(cfg_file="Cfg", **keywords)
    name, value = next(iter(keywords.items()))
    with pytest.raises(SystemExit) as done:
        test.parse_args(["Cfg", f"--{name.replace('_', '-')}", str(value)])
    assert done.value.code == 2 and message in capsys.readouterr().err


def test_debug_reads_as_the_first_images_with_pictures_and_leaves_the_value_as_given():
    options = test.parse_args(["Cfg", "--debug", "--images", "3", "--vis", "2"])
    assert (options.images, options.vis, options.debug_images) == (3, 2, 20)
    assert (options.image_limit, options.vis_limit) == (20, 20)
    wider = test.parse_args(["Cfg", "--debug", "--vis", "30", "--debug-images", "5"])
    assert (wider.image_limit, wider.vis_limit) == (5, 30)
    plain = test.parse_args(["Cfg", "--images", "3", "--vis", "2"])
    assert (plain.image_limit, plain.vis_limit) == (3, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.images = 4  # type: ignore[misc]


def test_predicts_command_line_and_keywords_give_one_value():
    argv = ["--snapshot", "x.pkl", "--source", "a.jpg", "clip.mp4", "--thresh", "0.5",
            "--set", "db.test_scales=[0.5]", "--exist-ok"]
    assert predict.parse_args(argv) == PredictOptions(
        snapshot=Path("x.pkl"), images=("a.jpg", "clip.mp4"), thresh=0.5,
        overrides={"db.test_scales": [0.5]}, exist_ok=True)
    plain = predict.parse_args(["--snapshot", "x.pkl", "--images", "a.jpg"])
    assert plain == PredictOptions(snapshot=Path("x.pkl"), images=("a.jpg",))
    for name, value in defaults(PredictOptions).items():
        assert getattr(plain, name) == value or name == "snapshot", name


def test_predict_needs_a_detector_and_inputs(capsys):
    with pytest.raises(UsageError, match="name a config, or a file alone with --snapshot"):
        PredictOptions(images=("a.jpg",))
    with pytest.raises(TypeError, match="images"):
        PredictOptions(cfg_file="Cfg")  # type: ignore[call-arg]
    with pytest.raises(SystemExit) as done:
        predict.parse_args(["Cfg"])
    assert done.value.code == 2
    assert "required: --images/--source" in capsys.readouterr().err

"""One snapshot argument: every script that names a snapshot takes `N` or `best` through
core.config.snapshot_arg, and the Python API takes the same values."""

from __future__ import annotations

import shutil

import pytest
from _tiny_coco import make_tiny_coco

from core.config import ConfigError
from cornernet import Detector
from cornernet.commands import analyze_results, benchmark, export, predict, test

# The scripts whose --testiter names a snapshot (or its results folder).
SCRIPTS = {"test": test, "predict": predict, "export": export, "benchmark": benchmark,
           "analyze results": analyze_results}


@pytest.mark.parametrize("command", SCRIPTS)
def test_every_script_takes_best_and_numbers(command, tmp_path):
    script = SCRIPTS[command]
    extra = ["--images", "x.jpg", "--out", str(tmp_path)] if command == "predict" else []
    for text, value in (("best", "best"), ("12", 12), ("best.aside2", "best.aside2")):
        assert script.parse_args(["CocoTiny", "--testiter", text, *extra]).testiter == value
    with pytest.raises(SystemExit):
        script.parse_args(["CocoTiny", "--testiter", "last", *extra])


@pytest.fixture(scope="module")
def tiny_best(coco128, tmp_path_factory):
    """CocoTiny with its snapshot 0 also saved as the best one."""
    root = make_tiny_coco(coco128, tmp_path_factory.mktemp("best"))
    folder = root / "cache" / "nnet" / "CocoTiny"
    shutil.copy(folder / "CocoTiny_0.pkl", folder / "CocoTiny_best.pkl")
    return root


def test_demo_draws_with_the_best_snapshot(tiny_best, coco128, capsys):
    demo = predict
    args = demo.parse_args(["CocoTiny", "--testiter", "best", "--thresh", "0", "--device", "cpu",
                            "--config-dir", str(tiny_best / "configs"),
                            "--images", str(coco128 / "images" / "000000000529.jpg"),
                            "--out", str(tiny_best / "pictures")])
    assert demo.run(args) == [tiny_best / "pictures" / "000000000529.jpg"]
    assert "drew 1 of 1 inputs" in capsys.readouterr().out


def test_detector_takes_best_and_refuses_other_words(tiny_best):
    detector = Detector.from_config("CocoTiny", "best", tiny_best / "configs", device="cpu")
    assert detector.network.evaluated_weights in ("ema", "raw")
    Detector.from_config("CocoTiny", "0", tiny_best / "configs", device="cpu")
    with pytest.raises(ConfigError, match="snapshot 'last': expected an iteration number or "
                                          "'best', got 'last'"):
        Detector.from_config("CocoTiny", "last", tiny_best / "configs", device="cpu")

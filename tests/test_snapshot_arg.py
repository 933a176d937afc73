"""One snapshot argument: every script that names a snapshot takes `N` or `best` through
core.config.snapshot_arg, and the Python API takes the same values."""

from __future__ import annotations

import json
import shutil

import pytest
from _tiny_coco import make_tiny_coco

from core.config import ConfigError, load_config
from core.nnet.checkpoint import RUN_CONFIG, default_snapshot
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


def test_no_snapshot_named_is_the_last_iteration_of_the_recorded_training(coco128, tmp_path,
                                                                          capsys):
    # CocoTiny says max_iter 1; its training ran with --set system.max_iter=0 (snapshot 0), as
    # the run folder's config.json records: the commands take snapshot 0 without --testiter.
    root = make_tiny_coco(coco128, tmp_path)
    folder = root / "cache" / "nnet" / "CocoTiny"
    system_config = load_config("CocoTiny", root / "configs")[0]
    assert default_snapshot(system_config) == 1  # nothing recorded: the config's max_iter
    record = json.loads((root / "configs" / "CocoTiny.json").read_text())
    record["system"]["max_iter"] = 0
    (folder / RUN_CONFIG).write_text(json.dumps(record))
    assert default_snapshot(system_config) == 0
    args = test.parse_args(["CocoTiny", "--config-dir", str(root / "configs"), "--device", "cpu",
                            "--images", "2", "--backend", "none"])
    test.run(args)
    assert f"loading {folder / 'CocoTiny_0.pkl'}" in capsys.readouterr().out
    assert (root / "results" / "CocoTiny" / "0").is_dir()
    # the config's own max_iter first, where its snapshot exists
    shutil.copy(folder / "CocoTiny_0.pkl", folder / "CocoTiny_1.pkl")
    assert default_snapshot(system_config) == 1
    # a record of an iteration without its snapshot, or unreadable: the config's max_iter
    (folder / "CocoTiny_1.pkl").unlink()
    record["system"]["max_iter"] = 7
    (folder / RUN_CONFIG).write_text(json.dumps(record))
    assert default_snapshot(system_config) == 1
    (folder / RUN_CONFIG).write_text("{not json")
    assert default_snapshot(system_config) == 1

"""One snapshot argument: every script that names a snapshot takes `N` or `best` through
core.config.snapshot_arg, and the Python API takes the same values."""

from __future__ import annotations

import json
import shutil

import pytest
from _tiny_coco import make_tiny_coco
from _train_helpers import run_train, write_config

from core.config import ConfigError, load_config
from core.errors import UsageError
from core.nnet.checkpoint import RUN_CONFIG, default_snapshot
from cornernet import Detector
from cornernet.commands import analyze_results, benchmark, export, predict, test
from cornernet.detector import open_detector

# A training of a few seconds: sizes as small as CornerNet_Tiny takes.
TINY_SIZES = {"input_size": [64, 64], "output_sizes": [[16, 16]], "top_k": 20, "num_dets": 100,
              "test_scales": [0.5]}
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
    # a record of an iteration without its snapshot, or no snapshot at all: the config's
    # max_iter (whose missing file the command then names)
    (folder / "CocoTiny_0.pkl").rename(folder / "CocoTiny_00.pkl")
    record["system"]["max_iter"] = 7
    (folder / RUN_CONFIG).write_text(json.dumps(record))
    assert default_snapshot(system_config) == 1


@pytest.mark.slow  # 2.5 s serially on 2 cores: the "not slow" loop keeps tests under 2 s
def test_the_default_snapshot_is_the_final_one_of_the_last_training(coco128, tmp_path, capsys):
    # Trained to 3, then afresh with --set system.max_iter=2: without --testiter, test takes
    # the second training's Tiny128_2.pkl, not the first one's Tiny128_3.pkl, and says so.
    config_dir = write_config(tmp_path, coco128, max_iter=3, val_iter=0, snapshot=100,
                              batch_size=2, db=TINY_SIZES)
    assert run_train(config_dir, inproc=True).returncode == 0
    assert run_train(config_dir, "--set", "system.max_iter=2", inproc=True).returncode == 0
    folder = tmp_path / "cache" / "nnet" / "Tiny128"
    assert {"Tiny128_2.pkl", "Tiny128_3.pkl"} <= {p.name for p in folder.iterdir()}
    capsys.readouterr()
    test.run(test.parse_args(["Tiny128", "--config-dir", str(config_dir), "--device", "cpu",
                              "--images", "1", "--backend", "none"]))
    out = capsys.readouterr().out
    assert f"loading {folder / 'Tiny128_2.pkl'}" in out
    assert ("note: taking Tiny128_2.pkl, the final snapshot of the last training (max_iter 2, "
            "config.json); Tiny128_3.pkl is of an earlier training: --testiter 3 takes it") in out
    assert (tmp_path / "results" / "Tiny128" / "2").is_dir()
    assert not (tmp_path / "results" / "Tiny128" / "3").exists()


def test_a_last_training_without_its_final_snapshot_is_refused_naming_both(coco128, tmp_path):
    # The last training (max_iter 5) stopped before its final snapshot; snapshot 1 (the
    # config's max_iter) is an earlier training's: neither is taken silently.
    root = make_tiny_coco(coco128, tmp_path)
    folder = root / "cache" / "nnet" / "CocoTiny"
    shutil.copy(folder / "CocoTiny_0.pkl", folder / "CocoTiny_1.pkl")
    record = json.loads((root / "configs" / "CocoTiny.json").read_text())
    record["system"]["max_iter"] = 5
    (folder / RUN_CONFIG).write_text(json.dumps(record))
    system_config = load_config("CocoTiny", root / "configs")[0]
    with pytest.raises(UsageError) as caught:
        default_snapshot(system_config)
    assert str(caught.value) == (
        f"which snapshot of CocoTiny? its last training (max_iter 5, {folder / RUN_CONFIG}) "
        "left no CocoTiny_5.pkl, and CocoTiny_1.pkl (the config's max_iter) is of an earlier "
        "training; name one with --testiter (iterations there: 0, 1)")


def test_a_damaged_run_record_is_named_moved_aside_and_said(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    folder = root / "cache" / "nnet" / "CocoTiny"
    shutil.copy(folder / "CocoTiny_0.pkl", folder / "CocoTiny_1.pkl")
    (folder / RUN_CONFIG).write_text('{"system": {"max_iter": 0')  # cut short
    system_config = load_config("CocoTiny", root / "configs")[0]
    said: list[str] = []
    assert default_snapshot(system_config, said.append) == 1
    assert not (folder / RUN_CONFIG).exists()
    assert (folder / "config.aside1.json").read_text() == '{"system": {"max_iter": 0'
    assert len(said) == 1 and said[0].startswith(
        f"warning: {folder / RUN_CONFIG} cannot be read (JSONDecodeError: ")
    assert said[0].endswith("moved aside to config.aside1.json, and the snapshot taken without "
                            "--testiter is the config's max_iter (the next training records a "
                            "new config.json)")
    (folder / RUN_CONFIG).write_text('{"system": {"max_iter": "0"}}')  # valid JSON, wrong type
    assert default_snapshot(system_config, said.append) == 1
    assert (folder / "config.aside2.json").is_file()
    assert "(system.max_iter is '0', not an iteration)" in said[1]


def test_a_config_beside_snapshot_must_exist_and_be_the_snapshots(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    snapshot = root / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.pkl"
    configs = root / "configs"
    with pytest.raises(ConfigError, match="NoSuchCfg"):
        open_detector("NoSuchCfg", snapshot, config_dir=configs, device="cpu")
    other = json.loads((configs / "CocoTiny.json").read_text())
    other["db"]["categories"] = 3
    (configs / "Other.json").write_text(json.dumps(other))
    with pytest.raises(UsageError) as caught:
        open_detector("Other", snapshot, config_dir=configs, device="cpu")
    assert str(caught.value) == (
        f"config Other named beside --snapshot {snapshot} is not the snapshot's: "
        "db.categories: the snapshot was trained for 80 classes, this config has 3; drop the "
        "config (a snapshot records its own) or name the one it was trained with")
    detector = open_detector("CocoTiny", snapshot, config_dir=configs, device="cpu")
    assert detector.system_config.model == "CornerNet_Tiny"

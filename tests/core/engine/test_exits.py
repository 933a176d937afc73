"""core.engine.exits: one table from an error to its exit status and message, the same in every
script and under every launcher; CORNERNET_DEBUG adds the traceback only when true.

The scripts run in the test process (`inproc`); train.py under the spawn launcher is a real
process tree (`slow`)."""

from __future__ import annotations

import json

import pytest
from _faults import one_line_error

from core.data.prefetch import WorkerError
from core.dbs import DatasetError
from core.engine.exits import debug_on, describe
from core.errors import ConfigError, UsageError
from core.inference.coco_eval import MissingEvaluator
from core.nnet.checkpoint import SnapshotMissing
from core.nnet.py_factory import NonFiniteLoss
from core.utils.files import DiskFull, NotWritable
from core.utils.images import ImageReadError
from tests._tiny_coco import inproc, make_tiny_coco
from tests._train_helpers import run_train, train_cmd, write_config


@pytest.mark.parametrize("err", [
    ConfigError("system.x: bad"), UsageError("--images 0"), DatasetError("no boxes"),
    ImageReadError("a.jpg", "cannot decode"), MissingEvaluator("pip install"),
    FileNotFoundError("annotation file not found: a.json"), NotWritable("cannot write x"),
    SnapshotMissing("no snapshot for iteration 3"),
], ids=lambda err: type(err).__name__)
def test_a_users_mistake_is_exit_2_and_its_message_alone(err):
    assert describe(err) == (2, str(err))


def test_a_multi_line_message_becomes_one_line_error():
    assert describe(ConfigError("first\n  second"))[1] == "first second"


@pytest.mark.parametrize("err", [DiskFull("disk full"), WorkerError("worker 1 died"),
                                 NonFiniteLoss({"focal": float("nan")})],
                         ids=lambda err: type(err).__name__)
def test_a_failure_at_run_time_is_exit_1_naming_its_cause_without_a_traceback(err):
    status, text = describe(err)
    assert status == 1 and str(err) in text and "Traceback" not in text


def test_an_unexpected_exception_is_exit_1_with_its_traceback():
    try:
        raise KeyError("surprise")
    except KeyError as err:
        status, text = describe(err)
    assert status == 1 and text.startswith("KeyError: 'surprise'") and "Traceback" in text


@pytest.mark.parametrize("value, on", [("", False), ("0", False), ("no", False), ("1", True),
                                       ("true", True), ("YES", True)])
def test_cornernet_debug_is_on_only_for_a_true_value(monkeypatch, value, on):
    monkeypatch.setenv("CORNERNET_DEBUG", value)
    assert debug_on([]) is on
    assert debug_on(["--debug"]) is True


@pytest.fixture
def no_train_annotations(tmp_path, coco128):
    missing = tmp_path / "gone" / "instances_train.json"
    folder = write_config(tmp_path, coco128, annotations={
        "train": str(missing), "val": str(coco128 / "annotations" / "instances_coco128_val.json")})
    return folder, missing


def train_inproc(folder, **env):
    """train.py on the Tiny128 config of `folder` (as `run_train` starts it) in this process."""
    return inproc(*train_cmd(folder)[1:], OMP_NUM_THREADS="1", **env)


def test_train_py_missing_annotation_file_is_one_line(no_train_annotations):
    folder, missing = no_train_annotations
    one_line_error(train_inproc(folder), "annotation file not found", str(missing))


@pytest.mark.slow  # a launcher's real processes
def test_train_py_missing_annotation_file_is_one_line_under_the_spawn_launcher(
        no_train_annotations):
    folder, missing = no_train_annotations
    one_line_error(run_train(folder, "--device", "cpu", "--distributed", "--world-size", "1",
                             "--procs-per-node", "2", timeout=120),
                   "annotation file not found", str(missing))


def test_train_py_debug_zero_shows_no_traceback_and_one_shows_it(no_train_annotations):
    folder, _ = no_train_annotations
    one_line_error(train_inproc(folder, CORNERNET_DEBUG="0"))
    loud = train_inproc(folder, CORNERNET_DEBUG="1")
    assert loud.returncode == 2 and "Traceback" in loud.stderr, loud.stderr


@pytest.fixture
def tiny_without_val_annotations(coco128, tmp_path):
    folder = make_tiny_coco(coco128, tmp_path)
    config_file = folder / "configs" / "CocoTiny.json"
    config = json.loads(config_file.read_text())
    missing = tmp_path / "gone.json"
    config["db"]["annotation_files"]["val"] = str(missing)
    config_file.write_text(json.dumps(config))
    return folder, missing


def test_test_py_missing_annotation_file_is_one_line_error(tiny_without_val_annotations):
    folder, missing = tiny_without_val_annotations
    args = ("CocoTiny", "--testiter", 0, "--config-dir", folder / "configs", "--device", "cpu")
    one_line_error(inproc("test.py", *args, CORNERNET_DEBUG="0"), "annotation file not found",
                   str(missing))
    assert "Traceback" in inproc("test.py", *args, CORNERNET_DEBUG="1").stderr


def test_demo_py_missing_annotation_file_it_names_is_one_line_error(tiny_without_val_annotations,
                                                               coco128, tmp_path):
    folder, missing = tiny_without_val_annotations
    image = min((coco128 / "images").iterdir())
    one_line_error(inproc("demo.py", "CocoTiny", "--testiter", 0, "--config-dir",
                          folder / "configs", "--images", image, "--out", tmp_path / "out",
                          "--device", "cpu"),
                   "annotation file not found", str(missing))

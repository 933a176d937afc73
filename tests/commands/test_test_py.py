"""test.py end to end on coco128 with an untrained CornerNet_Tiny snapshot, on CPU.

test.py runs in the test process (`inproc`) except where a process of its own is what is
tested: a stop by SIGTERM, SIGINT twice or SIGKILL. Those, and the in-process runs that take
more than about 2 s of CPU (a whole run to its metrics), are `slow`; the one-line mistakes are
the inner loop's."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import cv2
import numpy as np
import pytest
import torch
from _tiny_coco import ROOT, inproc, make_tiny_coco, script, script_env

from core.config import load_config
from core.errors import UsageError
from core.inference.coco_eval import METRIC_NAMES
from core.inference.folders import results_folder
from core.inference.journal import Journal


@pytest.fixture
def tiny_coco(coco128, tmp_path):
    return make_tiny_coco(coco128, tmp_path)


def cli(tiny_coco, *args, **env):
    """test.py on the tiny config; its snapshot is iteration 0 unless `args` name another."""
    if "--testiter" not in args:
        args = ("--testiter", 0, *args)
    return inproc("test.py", "CocoTiny", "--config-dir", tiny_coco / "configs", "--device",
                  "cpu", *args, **env)


def out_dir(root, split="val"):
    return root / "results" / "CocoTiny" / "0" / split


def one_line_error(done, code, *words):
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0]


@pytest.mark.slow  # in-process, but 3-7 s of CPU
def test_writes_results_metrics_and_a_summary_line(tiny_coco):
    done = cli(tiny_coco, "--images", 2)
    assert done.returncode == 0, done.stderr
    results = json.loads((out_dir(tiny_coco) / "results.json").read_text())
    assert {r["image_id"] for r in results} == {529, 531}  # the first two of the val split
    assert {r["category_id"] for r in results} == {1}
    saved = json.loads((out_dir(tiny_coco) / "metrics.json").read_text())
    assert list(saved["metrics"]) == list(METRIC_NAMES)
    assert all(math.isfinite(v) and -1 <= v <= 1 for v in saved["metrics"].values())
    assert saved["num_images"] == 2 and saved["unreadable"] == 0
    line = next(x for x in done.stdout.splitlines() if "images/s" in x)
    for stage in ("network", "decode", "NMS", "read", "evaluation"):
        assert stage in line
    assert not (out_dir(tiny_coco) / "partial.jsonl").exists()  # the journal of a finished run


@pytest.mark.slow  # in-process, but 3-7 s of CPU
def test_vis_draws_that_many_pictures_with_ground_truth(tiny_coco, coco128):
    done = cli(tiny_coco, "--images", 4, "--vis", 3, "--vis-thresh", 0.0)
    assert done.returncode == 0, done.stderr
    pictures = sorted((out_dir(tiny_coco) / "vis").iterdir())
    assert [p.name for p in pictures] == ["529.jpg", "531.jpg", "532.jpg"]
    assert all(cv2.imread(str(p)) is not None for p in pictures)


@pytest.mark.slow  # in-process, but 3-7 s of CPU
def test_vis_draws_ground_truth_in_white(tiny_coco, coco128):
    # Nothing scores above 1: only the ground truth is drawn. The largest box of image 529 is
    # [17.66, 238.87, 362.2, 348.54] (x, y, w, h); its top edge is grey in the photo.
    done = cli(tiny_coco, "--images", 1, "--vis", 1, "--vis-thresh", 1.0)
    assert done.returncode == 0, done.stderr
    drawn = cv2.imread(str(out_dir(tiny_coco) / "vis" / "529.jpg"))
    photo = cv2.imread(str(coco128 / "images" / "000000000529.jpg"))
    edge = np.s_[238, 80:375]
    assert photo[edge].mean() < 200 and drawn[edge].mean() > 235


@pytest.mark.slow  # in-process, but 3-7 s of CPU
def test_suffix_config_reuses_the_snapshot_and_gets_its_own_folder(tiny_coco):
    config = json.loads((tiny_coco / "configs" / "CocoTiny.json").read_text())
    config["db"]["test_scales"] = [0.25, 0.5]
    (tiny_coco / "configs" / "CocoTiny-two_scales.json").write_text(json.dumps(config))
    done = cli(tiny_coco, "--suffix", "two_scales", "--images", 1)
    assert done.returncode == 0, done.stderr
    assert (out_dir(tiny_coco) / "two_scales" / "metrics.json").is_file()


@pytest.mark.slow  # in-process, but 3-7 s of CPU
def test_batched_run_scores_every_image(tiny_coco):
    done = cli(tiny_coco, "--images", 5, "--batch", 3)
    assert done.returncode == 0, done.stderr
    saved = json.loads((out_dir(tiny_coco) / "metrics.json").read_text())
    assert saved["num_images"] == 5


def test_bucketed_batches_with_sync_timing_score_every_image(tiny_coco):
    done = cli(tiny_coco, "--images", 5, "--batch", 3, "--sync-timing",
               "--set", "db.test_buckets=[[255, 255]]")
    assert done.returncode == 0, done.stderr
    saved = json.loads((out_dir(tiny_coco) / "metrics.json").read_text())
    assert saved["num_images"] == 5


# ---- resuming -----------------------------------------------------------------------------

def _interrupt_after(tiny_coco, images, stop):
    """Start test.py on `images` images, call `stop(process)` once 3 are journalled."""
    journal = out_dir(tiny_coco) / "partial.jsonl"
    process = subprocess.Popen(
        script("test.py", "CocoTiny", "--testiter", 0, "--config-dir", tiny_coco / "configs",
               "--device", "cpu", "--images", images), cwd=ROOT, env=script_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if journal.is_file() and journal.read_text().count("\n") >= 4:  # header + 3 images
            stop(process)
            break
        time.sleep(0.005)
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def _journal_left(tiny_coco, monkeypatch, images, keep):
    """The journal test.py writes on `images` images, cut after `keep` of them as a kill
    leaves it: test.py runs in this process to its end with the journal's removal held back."""
    monkeypatch.setattr(Journal, "remove", Journal.close)
    done = cli(tiny_coco, "--images", images)
    monkeypatch.undo()
    assert done.returncode == 0, done.stderr
    journal = out_dir(tiny_coco) / "partial.jsonl"
    lines = journal.read_bytes().split(b"\n")
    assert len(lines) == images + 2  # header, one line per image, the empty after the last
    journal.write_bytes(b"\n".join(lines[:keep + 1]) + b"\n")
    return journal


def _metrics(root):
    folder = out_dir(root)
    return (json.loads((folder / "metrics.json").read_text()),
            (folder / "results.json").read_bytes())


@pytest.fixture(scope="module")
def uninterrupted(coco128, tmp_path_factory):
    """Metrics and results of an uninterrupted 10-image run (its own folders)."""
    root = make_tiny_coco(coco128, tmp_path_factory.mktemp("whole"), test_scales=[0.5])
    done = cli(root, "--images", 10)
    assert done.returncode == 0, done.stderr
    return _metrics(root)


@pytest.mark.slow  # a process stopped from outside
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_interrupted_run_resumes_to_the_same_metrics(coco128, tmp_path, uninterrupted, how):
    root = make_tiny_coco(coco128, tmp_path, test_scales=[0.5])
    code, stderr = _interrupt_after(root, 10, lambda p: p.send_signal(getattr(signal, how)))
    if how == "SIGTERM":
        assert code == 128 + signal.SIGTERM and "run the same command again" in stderr
        assert "Traceback" not in stderr
    else:
        assert code == -signal.SIGKILL
    journalled = (out_dir(root) / "partial.jsonl").read_text().count("\n") - 1
    assert 3 <= journalled < 10, "the run was not interrupted in the middle"

    done = cli(root, "--images", 10)
    assert done.returncode == 0, done.stderr
    assert "resuming:" in done.stdout
    metrics, results = _metrics(root)
    assert metrics["metrics"] == uninterrupted[0]["metrics"]
    assert results == uninterrupted[1]
    assert metrics["num_images"] == 10


@pytest.mark.slow  # in-process, but 3-7 s of CPU
def test_changed_settings_do_not_reuse_a_partial_run(tiny_coco, monkeypatch):
    journal = _journal_left(tiny_coco, monkeypatch, 5, 3)
    assert journal.is_file()
    config = json.loads((tiny_coco / "configs" / "CocoTiny.json").read_text())
    config["db"]["top_k"] = 10
    (tiny_coco / "configs" / "CocoTiny.json").write_text(json.dumps(config))
    done = cli(tiny_coco, "--images", 5)
    assert done.returncode == 0, done.stderr
    assert "starting afresh" in done.stdout and "config" in done.stdout
    assert "resuming" not in done.stdout


# ---- failing before the long part -------------------------------------------------------

def test_missing_evaluator_stops_before_loading_the_network(tiny_coco, monkeypatch):
    for package in ("faster_coco_eval", "pycocotools"):  # None in sys.modules: ImportError
        monkeypatch.setitem(sys.modules, package, None)
    done = cli(tiny_coco)
    one_line_error(done, 2, "faster-coco-eval", "'coco' extra")
    assert "loading" not in done.stdout


def test_unwritable_results_folder_is_one_line(tiny_coco):
    config = json.loads((tiny_coco / "configs" / "CocoTiny.json").read_text())
    (tiny_coco / "a_file").write_text("")
    config["system"]["result_dir"] = str(tiny_coco / "a_file" / "results")
    (tiny_coco / "configs" / "CocoTiny.json").write_text(json.dumps(config))
    done = cli(tiny_coco)
    one_line_error(done, 2, "cannot write results", "a_file")
    assert "loading" not in done.stdout


def test_missing_snapshot_is_one_line(tiny_coco):
    done = cli(tiny_coco, "--testiter", 7)
    one_line_error(done, 2, "no snapshot for iteration 7", "CocoTiny_0.pkl")


def test_traceback_only_when_asked(tiny_coco):
    assert "Traceback" in cli(tiny_coco, "--testiter", 7, CORNERNET_DEBUG="1").stderr


def test_bad_usage_exits_2(tiny_coco):
    assert cli(tiny_coco, "--images", 0).returncode == 2
    one_line_error(inproc("test.py", "NoSuchConfig"), 2, "NoSuchConfig")


# ---- unreadable images and test-dev -------------------------------------------------------

@pytest.mark.slow  # in-process, but 3-7 s of CPU
def test_unreadable_image_is_a_counted_miss(coco128, tmp_path):
    images = tmp_path / "images"
    shutil.copytree(coco128 / "images", images, symlinks=True)
    first = images / "000000000529.jpg"
    first.unlink()
    first.write_bytes(b"not a jpeg")
    root = make_tiny_coco(coco128, tmp_path, image_dirs={"val": str(images)})
    done = cli(root, "--images", 4)
    assert done.returncode == 0, done.stderr
    assert "1 of 4 images could not be read" in done.stdout and "000000000529.jpg" in done.stdout
    saved = json.loads((out_dir(root) / "metrics.json").read_text())
    assert saved["num_images"] == 4 and saved["unreadable"] == 1


def test_testdev_as_downloaded(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    coco = tmp_path / "data" / "coco"
    (coco / "annotations").mkdir(parents=True)
    (coco / "images").mkdir()
    os.symlink(coco128 / "images", coco / "images" / "test2017")
    info = json.loads((coco128 / "annotations" / "instances_coco128_val.json").read_text())
    del info["annotations"]
    (coco / "annotations" / "image_info_test-dev2017.json").write_text(json.dumps(info))
    config = json.loads((root / "configs" / "CocoTiny.json").read_text())
    config["system"]["data_dir"] = str(tmp_path / "data")
    del config["db"]["image_dirs"], config["db"]["annotation_files"]
    (root / "configs" / "CocoTiny.json").write_text(json.dumps(config))

    done = cli(root, "--split", "testdev", "--images", 2)
    assert done.returncode == 0, done.stderr
    assert "evaluation skipped: this split has no boxes" in done.stdout
    results = json.loads((out_dir(root, "testdev") /
                          "detections_test-dev2017_CocoTiny_results.json").read_text())
    assert results and set(results[0]) == {"image_id", "category_id", "bbox", "score"}
    assert not (out_dir(root, "testdev") / "metrics.json").exists()


@pytest.mark.slow  # a process stopped from outside
def test_ctrl_c_twice_stops_quietly(tiny_coco):
    def two_interrupts(process):
        process.send_signal(signal.SIGINT)
        process.send_signal(signal.SIGINT)

    code, stderr = _interrupt_after(tiny_coco, 12, two_interrupts)
    assert code == 128 + signal.SIGINT and "Traceback" not in stderr


def test_results_never_leave_the_results_folder(tiny_coco):
    system_config, _ = load_config("CocoTiny", tiny_coco / "configs")
    inside = results_folder(system_config, 0, "val")
    assert inside == tiny_coco / "results" / "CocoTiny" / "0" / "val"
    assert (results_folder(system_config, "best", "val", "multi")
            == inside.parent.parent / "best" / "val" / "multi")
    with pytest.raises(UsageError, match="outside system.result_dir"):
        results_folder(system_config, 0, "../../../elsewhere")


@pytest.mark.slow  # in-process, but 3-7 s of CPU
def test_a_damaged_journal_line_is_named_and_redone(tiny_coco, monkeypatch):
    """A journal line edited by hand (or a flipped byte) made every rerun fail; now the rerun
    names the file and the line, redoes from there and says how to start afresh."""
    journal = _journal_left(tiny_coco, monkeypatch, 8, 3)
    lines = journal.read_bytes().split(b"\n")
    lines[2] = b'{"id": "not a number", "dets": {}}'  # the second image
    lines[3] = b"\xff" + lines[3]
    journal.write_bytes(b"\n".join(lines))
    done = cli(tiny_coco, "--images", 8)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if "is damaged" in line]
    assert len(said) == 1 and str(journal) in said[0]
    assert "resuming: 1 images already done" in said[0] and "line 3 is damaged" in said[0]
    assert "--no-resume" in said[0]
    assert json.loads((out_dir(tiny_coco) / "metrics.json").read_text())["num_images"] == 8


@pytest.mark.slow  # in-process, but 3-7 s of CPU
def test_system_snapshot_name_is_where_the_snapshots_are_found(tiny_coco):
    """train.py, demo.py and plot_metrics read snapshots under system.snapshot_name; test.py
    used the config name and found none of that run's snapshots."""
    config_file = tiny_coco / "configs" / "CocoTiny.json"
    config = json.loads(config_file.read_text())
    config["system"]["snapshot_name"] = "Renamed"
    config_file.write_text(json.dumps(config))
    old = tiny_coco / "cache" / "nnet" / "CocoTiny"
    new = tiny_coco / "cache" / "nnet" / "Renamed"
    new.mkdir()
    (old / "CocoTiny_0.pkl").rename(new / "Renamed_0.pkl")
    done = cli(tiny_coco, "--images", 2)
    assert done.returncode == 0, done.stderr
    assert f"loading {new / 'Renamed_0.pkl'}" in done.stdout


@pytest.mark.slow  # two test.py runs in-process
def test_a_snapshot_trained_with_sync_bn_and_fp16_is_tested_on_the_cpu(tiny_coco):
    """`test.py --device cpu` on a config (and its snapshot's record) trained on GPUs with
    system.sync_bn and fp16: the inference network has no SyncBatchNorm, gradient scaler or
    training device rules, so it runs, in float32, and detects what the plain config does."""
    assert cli(tiny_coco, "--images", 2, "--backend", "none").returncode == 0
    results = out_dir(tiny_coco) / "results.json"
    plain = json.loads(results.read_text())
    config_file = tiny_coco / "configs" / "CocoTiny.json"
    config = json.loads(config_file.read_text())
    config["system"].update(sync_bn=True, amp="fp16")
    config_file.write_text(json.dumps(config))
    snapshot_file = tiny_coco / "cache" / "nnet" / "CocoTiny" / "CocoTiny_0.pkl"
    snapshot = torch.load(snapshot_file, weights_only=True)
    snapshot["config"]["system"].update(sync_bn=True, amp="fp16")
    torch.save(snapshot, snapshot_file)
    done = cli(tiny_coco, "--images", 2, "--backend", "none")
    assert done.returncode == 0, done.stderr
    assert "on cpu" in done.stdout
    assert json.loads(results.read_text()) == plain

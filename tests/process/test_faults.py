"""The fault suite: each case runs train.py and checks the exit code, the one-line message (no
traceback) and what is left: files and processes.

A case whose fault comes from outside the run (a signal, a kill, a mount namespace) runs train.py
as a process of its own and is `slow`; the others run its command line in this process
(`run_train(..., inproc=True)`): a refusal at start then costs milliseconds, not a process start.

The README's reliability table lists these cases; keep the two in step.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _faults import NAME, cache, in_mount_namespace, load, one_line_error, wait_gone

from tests._train_helpers import (
    Training,
    alive,
    interrupted,
    losses,
    run_train,
    train_cmd,
    write_config,
)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP])
def test_no_process_of_the_run_outlives_its_trainer(tmp_path, coco128, signum):
    """kill -9 (the OOM killer) or SIGHUP (a closed terminal): every process the run started,
    found by walking its tree while it ran, is gone 10 s later."""
    config_dir = write_config(tmp_path, coco128, max_iter=100000, snapshot=100000, val_iter=3)
    code, output, tree = interrupted(config_dir, r"iteration 4: loss", signum)
    assert len(tree) >= 3  # the fork server and the prefetch workers at least
    assert not wait_gone(tree, 10), [p for p in alive(tree)]
    if signum == signal.SIGHUP:  # stops like SIGTERM: a snapshot of the last iteration
        assert code == 128 + signal.SIGHUP, output
        done = max(losses(output))
        assert (tmp_path / "cache" / "nnet" / NAME / f"{NAME}_{done}.pkl").is_file()
    else:
        assert code == -signal.SIGKILL


def test_non_positive_max_iter_is_one_line(tmp_path, coco128):
    result = run_train(write_config(tmp_path, coco128, max_iter=-5), inproc=True)
    one_line_error(result, "max_iter")


@pytest.fixture(scope="module")
def namespaces():
    probe = subprocess.run(in_mount_namespace("mount -t tmpfs -o size=1m none /mnt", ["true"]),
                           capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("this machine does not allow private mount namespaces (unshare -rm), "
                    "which the disk and /dev/shm cases need")


@pytest.mark.slow
def test_kill_during_a_snapshot_write_leaves_nothing_torn_and_the_next_run_cleans_up(
        tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=100000, snapshot=1, val_iter=0)
    run = Training(config_dir, "--workers", "1")
    try:
        run.wait_for(r"iteration 3: loss")
        deadline = time.monotonic() + 60
        while not list(cache(tmp_path).glob(".*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.002)  # catch it inside a write
        run.proc.send_signal(signal.SIGKILL)
        run.finish(timeout=30)
    finally:
        run.kill()
    left = list(cache(tmp_path).glob(".*.tmp"))
    for path in cache(tmp_path).glob(f"{NAME}_*.pkl"):
        assert load(path)["iteration"] == int(path.stem.split("_")[-1])
    resumed = run_train(config_dir, "--iter", "latest", "--initialize", inproc=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert not list(cache(tmp_path).glob(".*.tmp"))
    for path in left:
        assert f"removed {path.name}" in resumed.stdout


@pytest.mark.slow
def test_a_full_disk_at_snapshot_time_is_one_line_and_keeps_the_earlier_snapshots(
        tmp_path, coco128, namespaces):
    sizing = write_config(tmp_path / "sizing", coco128, max_iter=1, snapshot=1, val_iter=0)
    # a snapshot with Adam's state, as the run's
    assert run_train(sizing, inproc=True).returncode == 0
    size = (tmp_path / "sizing" / "cache" / "nnet" / NAME / f"{NAME}_1.pkl").stat().st_size
    disk = tmp_path / "disk"
    disk.mkdir()
    config_dir = write_config(tmp_path, coco128, max_iter=6, snapshot=1, val_iter=0,
                              cache_dir=str(disk))
    # Room for the start-up check (two snapshots) and a little more, not for six.
    mounts = f"mount -t tmpfs -o size={int(2.6 * size) + 400_000} none {disk}"
    result = run_train(config_dir, cmd=in_mount_namespace(
        mounts + f" && cp -r {tmp_path / 'sizing' / 'cache' / 'dbs'} {disk}/dbs",
        train_cmd(config_dir) + ["--workers", "1"]))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "disk full" in errors[0], result.stderr


@pytest.mark.slow
def test_a_read_only_cache_folder_is_one_line_before_training(tmp_path, coco128, namespaces):
    disk = tmp_path / "ro"
    disk.mkdir()
    config_dir = write_config(tmp_path, coco128, cache_dir=str(disk))
    t0 = time.monotonic()
    result = run_train(config_dir, cmd=in_mount_namespace(
        f"mount -t tmpfs -o ro,size=1m none {disk}", train_cmd(config_dir)))
    assert time.monotonic() - t0 < 60  # a bound on hanging; "before training" is the one line
    one_line_error(result, "cannot write in", "system.cache_dir")


@pytest.mark.slow
def test_too_little_dev_shm_is_one_line_naming_the_ways_out(tmp_path, coco128, namespaces):
    config_dir = write_config(tmp_path, coco128)
    result = run_train(config_dir, cmd=in_mount_namespace(
        "mount -t tmpfs -o size=64k none /dev/shm", train_cmd(config_dir)))
    one_line_error(result, "/dev/shm", "--workers", "prefetch_size", "--shm-size")


@pytest.mark.slow  # two runs of one iteration in-process
def test_a_truncated_dataset_cache_is_named_and_rebuilt(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=1, val_iter=0)
    assert run_train(config_dir, inproc=True).returncode == 0
    caches = list((tmp_path / "cache" / "dbs").glob("*.npz"))
    assert caches
    for path in caches:
        path.write_bytes(path.read_bytes()[:100])
    result = run_train(config_dir, inproc=True)
    assert result.returncode == 0, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert all(path.name in said for path in caches)
    for path in caches:
        assert path.stat().st_size > 100


@pytest.mark.parametrize("system, db, words", [
    ({"max_iter": 0}, {}, ["max_iter"]),
    ({"snapshot_name": "../../x"}, {}, ["snapshot_name"]),
    ({}, {"input_size": [128, 0]}, ["input_size"]),
    ({}, {"input_size": [120, 120]}, ["input_size", "use 95 or 127"]),
    ({}, {"output_sizes": [[16, 16]]}, ["output_sizes", "[[32, 32]]"]),
])
def test_settings_that_cannot_be_right_are_one_line(tmp_path, coco128, system, db, words):
    one_line_error(run_train(write_config(tmp_path, coco128, db=db, **system), inproc=True),
                   *words)


def test_a_training_split_without_annotations_is_one_line(tmp_path, coco128):
    source = coco128 / "annotations" / "instances_coco128_train.json"
    bare = json.loads(source.read_text())
    del bare["annotations"]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(bare))
    annotations = {"train": str(path),
                   "val": str(coco128 / "annotations" / "instances_coco128_val.json")}
    one_line_error(run_train(write_config(tmp_path, coco128, annotations=annotations),
                             inproc=True), "bare.json", "annotations")


def test_strict_images_with_a_missing_image_is_one_line(tmp_path, coco128):
    images = tmp_path / "images"
    shutil.copytree(coco128 / "images", images)
    victim = min(images.iterdir())
    victim.unlink()
    result = run_train(write_config(tmp_path, coco128, images=images, strict_images=True),
                       inproc=True)
    assert result.returncode in (1, 2), result.stdout + result.stderr
    assert "Traceback" not in result.stderr.split("prefetch worker")[0]
    assert victim.name in result.stderr


@pytest.mark.slow  # a run of two iterations in-process first
def test_a_snapshot_of_another_class_count_is_one_line(tmp_path, coco128):
    first = write_config(tmp_path, coco128, max_iter=2, snapshot=2, val_iter=0)
    assert run_train(first, inproc=True).returncode == 0
    # The same images annotated with the first 10 classes only.
    annotations = {}
    for split in ("train", "val"):
        data = json.loads((coco128 / "annotations" / f"instances_coco128_{split}.json")
                          .read_text())
        keep = {c["id"] for c in data["categories"][:10]}
        data["categories"] = data["categories"][:10]
        data["annotations"] = [a for a in data["annotations"] if a["category_id"] in keep]
        annotations[split] = str(tmp_path / f"ten_{split}.json")
        Path(annotations[split]).write_text(json.dumps(data))
    other = write_config(tmp_path, coco128, max_iter=4, snapshot=2, val_iter=0,
                         annotations=annotations, db={"categories": 10})
    one_line_error(run_train(other, "--iter", "2", inproc=True), "80 classes", "10")


def test_json_nested_too_deep_is_one_line(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128)
    path = config_dir / f"{NAME}.json"
    path.write_text(path.read_text()[:-2] + ', "deep": ' + "[" * 100000 + "]" * 100000 + "}")
    one_line_error(run_train(config_dir, inproc=True), f"{NAME}.json")


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_quietly(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=100000, snapshot=100000, val_iter=0)
    code, output, tree = interrupted(config_dir, r"iteration 2: loss", signal.SIGINT,
                                     signal.SIGINT, cmd=train_cmd(config_dir, NAME, "--workers",
                                                                  "1"))
    assert code == 128 + signal.SIGINT
    assert "Traceback" not in output and "KeyboardInterrupt" not in output
    assert not wait_gone(tree, 10)


def test_a_split_with_no_readable_image_is_one_line(tmp_path, coco128):
    empty = tmp_path / "no_images"
    empty.mkdir()
    result = run_train(write_config(tmp_path, coco128, images=empty), inproc=True)
    one_line_error(result, "none of the", "db.image_dirs")


def test_cornernet_debug_shows_the_traceback_of_a_mistake(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=0)
    quiet = run_train(config_dir, inproc=True)
    loud = run_train(config_dir, env={"CORNERNET_DEBUG": "1"}, inproc=True)
    assert quiet.returncode == loud.returncode == 2
    assert "Traceback" not in quiet.stderr and "Traceback" in loud.stderr


def test_a_missing_evaluator_is_one_line_before_training_when_evaluating(tmp_path, coco128,
                                                                       monkeypatch):
    # Neither evaluator can be imported: a None in sys.modules makes `import` raise ImportError,
    # as the packages' absence does (the evaluator is imported when it is needed).
    for package in ("faster_coco_eval", "pycocotools", "pycocotools.coco",
                    "pycocotools.cocoeval"):
        monkeypatch.setitem(sys.modules, package, None)
    result = run_train(write_config(tmp_path, coco128, eval_iter=100), inproc=True)
    one_line_error(result, "'coco' extra")
    assert "iteration 1:" not in result.stdout


@pytest.mark.slow  # a run of two iterations in-process first
def test_resuming_with_another_optimizer_is_one_line(tmp_path, coco128):
    assert run_train(write_config(tmp_path, coco128, max_iter=2, snapshot=2, val_iter=0,
                                  opt_algo="sgd"), inproc=True).returncode == 0
    other = write_config(tmp_path, coco128, max_iter=4, snapshot=2, val_iter=0, opt_algo="adam")
    one_line_error(run_train(other, "--iter", "2", inproc=True), "optimizer state",
                   "system.pretrain")

"""Watching a real training run (tiny model on coco128): the metrics file across a SIGTERM and
`--iter latest`, TensorBoard beside it, the data-only dry run, AP during training.

The SIGTERM comes from outside, so that run is a process of its own, as is the spawn launcher's;
every other train.py and test.py run goes through its command line in this process
(`run_train(..., inproc=True)`, `run_script`)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from core.engine.metrics import read_lines
from tests._inproc import run_script
from tests._train_helpers import REPO, interrupted, run_train, train_cmd, write_config

NAME = "Tiny128"
TRAINING_KEYS = {"iteration", "loss", "focal", "pull", "push", "off", "terms", "lr", "grad_norm",
                 "images_per_s", "data_wait", "skipped_images", "dropped_objects",
                 "skipped_steps", "time"}


def metrics_file(tmp_path):
    return tmp_path / "cache" / "nnet" / NAME / "metrics.jsonl"


@pytest.mark.slow  # a train.py process stopped by SIGTERM, then resumed in-process
def test_metrics_hold_each_iteration_once_across_sigterm_and_resume_latest(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=12, snapshot=4, val_iter=3,
                              display=1)
    code, output, _ = interrupted(config_dir, r"iteration 6: loss", signal.SIGTERM,
                                  cmd=train_cmd(config_dir, NAME, "--workers", "1"))
    assert code == 128 + signal.SIGTERM, output
    stopped = max(line["iteration"] for line in read_lines(metrics_file(tmp_path)))
    assert 6 <= stopped < 12
    # A later crash may have left lines past the snapshot; they must not survive a resume.
    with open(metrics_file(tmp_path), "a") as handle:
        handle.write('{"iteration": 99, "loss": 1.0}\n{"iteration": 100, "lo')
    resumed = run_train(config_dir, "--iter", "latest", inproc=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"continuing from snapshot {stopped}" in resumed.stdout
    lines = read_lines(metrics_file(tmp_path))
    assert [line["iteration"] for line in lines] == list(range(1, 13))
    for line in lines:
        assert TRAINING_KEYS <= set(line), sorted(TRAINING_KEYS - set(line))
        assert line["terms"] == ["focal", "pull", "push", "off"]
        assert 0 <= line["data_wait"] <= 1 and line["images_per_s"] > 0
    # Validation runs every 3 iterations; a stop may come inside iteration `stopped` before it.
    assert [("val_loss" in line) for line in lines if line["iteration"] != stopped] == \
        [it % 3 == 0 for it in range(1, 13) if it != stopped]
    assert lines[0]["lr"] == pytest.approx(0.0005, rel=1e-12)
    times = [line["time"] for line in lines]  # wall time continues from the stopped run's
    assert times == sorted(times) and times[stopped] > times[stopped - 1] > 0


@pytest.mark.slow  # four iterations in-process
def test_tensorboard_events_match_the_metrics_file(tmp_path, coco128):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config_dir = write_config(tmp_path, coco128, max_iter=4, snapshot=4, val_iter=0,
                              display=2, tensorboard=True)
    result = run_train(config_dir, inproc=True)
    assert result.returncode == 0, result.stdout + result.stderr
    events = EventAccumulator(str(metrics_file(tmp_path).parent / "tb"))
    events.Reload()
    lines = read_lines(metrics_file(tmp_path))
    for key in ("loss", "focal", "lr", "grad_norm"):
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        assert logged == [(line["iteration"], pytest.approx(line[key], rel=1e-6))
                          for line in lines], key


@pytest.mark.slow  # five batches read by the workers: real data work, 1-5 s
def test_dry_run_prints_its_figures_and_trains_nothing(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128)
    result = run_train(config_dir, "--dry-run", "5", inproc=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dry run: 5 batches" in result.stdout
    for words in ("images/s", "bytes", "reading", "augmenting", "queueing"):
        assert words in result.stdout, words
    assert not list((tmp_path / "cache").rglob("*.pkl"))
    assert not metrics_file(tmp_path).exists()


def shapes_config(tmp_path, train_images: int = 64, **system) -> Path:
    """CornerNet_Tiny on a small generated Shapes dataset (16 validation images), every path
    under `tmp_path`."""
    config = json.loads((REPO / "configs" / "CornerNet_Tiny.json").read_text())
    config["system"].update(cache_dir=str(tmp_path / "cache"), data_dir=str(tmp_path / "data"),
                            result_dir=str(tmp_path / "results"), **system)
    config["db"].update(num_train_images=train_images, num_val_images=16)
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "CornerNet_Tiny.json").write_text(json.dumps(config))
    return folder


@pytest.mark.slow  # 40 iterations and two evaluations in-process
def test_ap_during_training_picks_the_best_snapshot_and_test_py_reproduces_it(tmp_path):
    # AP on this data: 0 at iteration 20, about 0.02 at 40: two evaluations that differ.
    config_dir = shapes_config(tmp_path, max_iter=40, eval_iter=20, snapshot=20, display=10,
                               val_iter=0, batch_size=8, learning_rate=0.002)
    result = run_train(config_dir, name="CornerNet_Tiny", inproc=True)
    assert result.returncode == 0, result.stdout + result.stderr
    folder = tmp_path / "cache" / "nnet" / "CornerNet_Tiny"
    lines = read_lines(folder / "metrics.jsonl")
    evaluated = {line["iteration"]: line for line in lines if "AP" in line}
    assert sorted(evaluated) == [20, 40]
    for line in evaluated.values():
        assert {"AP", "AP50", "AP75", "APs", "APm", "APl"} <= set(line)
    aps = {it: line["AP"] for it, line in evaluated.items()}
    assert max(aps.values()) > 0  # it learned something, so "best" means something
    best_it = min(it for it, ap in aps.items() if ap == max(aps.values()))
    best = torch.load(folder / "CornerNet_Tiny_best.pkl", map_location="cpu",
                      weights_only=True)
    assert best["best"] == {"iteration": best_it, "AP": aps[best_it]}
    assert best["iteration"] == best_it

    tested = run_script("test.py", "CornerNet_Tiny", "--testiter", "best", "--config-dir",
                        config_dir, "--device", "cpu")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    metrics = json.loads((tmp_path / "results" / "CornerNet_Tiny" / "best" / "val" /
                          "metrics.json").read_text())
    assert metrics["metrics"]["AP"] == pytest.approx(aps[best_it], abs=1e-12)


@pytest.mark.slow  # the spawn launcher's two ranks, then test.py in-process
def test_two_processes_split_the_evaluation_and_score_every_image(tmp_path):
    # The subject is the evaluation split over the ranks, not what training reached: two
    # iterations (one batch of 4 per rank each) lead to it.
    config_dir = shapes_config(tmp_path, train_images=16, max_iter=2, eval_iter=2, snapshot=2,
                               display=1, val_iter=0, batch_size=8, learning_rate=0.002)
    result = run_train(config_dir, "--distributed", "--world-size", "1",
                       "--procs-per-node", "2", "--workers", "1", name="CornerNet_Tiny")
    assert result.returncode == 0, result.stdout + result.stderr
    scored = json.loads((tmp_path / "results" / "CornerNet_Tiny" / "2" / "val" /
                         "metrics.json").read_text())
    assert scored["num_images"] == 16  # 8 detected by each rank, gathered on rank 0
    line = read_lines(tmp_path / "cache" / "nnet" / "CornerNet_Tiny" / "metrics.jsonl")[-1]
    assert line["iteration"] == 2 and line["AP"] == scored["metrics"]["AP"]

    tested = run_script("test.py", "CornerNet_Tiny", "--testiter", "2", "--config-dir",
                        config_dir, "--device", "cpu", "--no-resume")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    again = json.loads((tmp_path / "results" / "CornerNet_Tiny" / "2" / "val" /
                        "metrics.json").read_text())
    assert again["metrics"]["AP"] == pytest.approx(line["AP"], abs=1e-12)

"""Helpers for tests that interrupt a run and compare its end with an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _train_helpers import run_spawned, run_train, write_config

NAME = "Tiny128"
SMALL = {"input_size": [64, 64], "output_sizes": [[16, 16]]}
# SGD, so that a step is lr times the gradient: equal parameters mean equal gradients throughout.
SGD = {"opt_algo": "sgd", "learning_rate": 0.01, "stepsize": 100000, "val_iter": 0,
       "display": 1, "batch_size": 4}


def snapshot(root: Path, iteration: int) -> dict:
    path = root / "cache" / "nnet" / NAME / f"{NAME}_{iteration}.pkl"
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_equal_params(a: dict, b: dict) -> None:
    """Bit-equal weights and BN buffers: same process count, same chunks, same gloo sums."""
    assert a.keys() == b.keys()
    different = [key for key in a if not torch.equal(a[key], b[key])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


def spawned_reference(tmp: Path, coco128: Path, capfd: pytest.CaptureFixture | None = None,
                      **system) -> Path:
    """The same config trained without interruption by our own launcher, 2 processes; with
    `capfd`, on the main thread, the launcher runs in this process (`run_spawned`)."""
    config_dir = write_config(tmp, coco128, db=SMALL, **SGD, **system)
    result = (run_spawned(config_dir, 2, "--workers", "1", capfd=capfd) if capfd else
              run_train(config_dir, "--distributed", "--world-size", "1", "--procs-per-node",
                        "2", "--workers", "1", timeout=400))
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp


def metrics(root: Path) -> list[dict]:
    path = root / "cache" / "nnet" / NAME / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_one_record(root: Path, last: int) -> None:
    """metrics.jsonl: every iteration once, in order, and `time` never falls back."""
    lines = metrics(root)
    assert [line["iteration"] for line in lines] == list(range(1, last + 1))
    times = [line["time"] for line in lines]
    assert times == sorted(times), times

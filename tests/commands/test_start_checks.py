"""What can be found at start is found at start: train.py's one-line refusals before iteration 1.

train.py runs in this process (`run_train(..., inproc=True)`): a refusal costs milliseconds, not
an interpreter's start, so these are in the fast `-m "not slow"` loop."""

from __future__ import annotations

import json

import pytest
from _faults import one_line_error
from _train_helpers import run_train, write_config

from core.errors import ConfigError
from core.utils.dist import check_backend


@pytest.mark.parametrize("change, words", [
    ("missing", ["validation split 'val' (system.val_iter is set)", "val.json",
                 "system.val_iter to 0"]),
    ("malformed", ["validation split 'val' (system.val_iter is set)", "malformed JSON"]),
    ("no images", ["val.json", "has no images", "system.val_iter to 0"]),
])
def test_val_iter_with_a_validation_file_that_cannot_serve_is_one_line_before_training(
        tmp_path, coco128, change, words):
    data = json.loads((coco128 / "annotations" / "instances_coco128_val.json").read_text())
    val = tmp_path / "val.json"
    if change == "malformed":
        val.write_text(json.dumps(data)[:-40])
    elif change == "no images":
        val.write_text(json.dumps({**data, "images": [], "annotations": []}))
    annotations = {"train": str(coco128 / "annotations" / "instances_coco128_train.json"),
                   "val": str(val)}
    result = run_train(write_config(tmp_path, coco128, val_iter=2, eval_iter=0,
                                    annotations=annotations), inproc=True)
    one_line_error(result, *words)
    assert "iteration 1:" not in result.stdout


def test_max_iter_beyond_64_bits_is_one_line_at_load(tmp_path, coco128):
    result = run_train(write_config(tmp_path, coco128, max_iter=2 ** 63), inproc=True)
    one_line_error(result, "system.max_iter is 9223372036854775808, beyond the 64-bit integers")


@pytest.mark.parametrize("backend, words", [
    ("ncl", "--dist-backend 'ncl' is not a process-group backend; did you mean 'nccl'?"),
    ("nccl", "--dist-backend nccl needs GPUs and this run has none"),
])
def test_a_backend_the_run_cannot_use_is_refused(backend, words):
    with pytest.raises(ConfigError) as caught:
        check_backend(backend, "cpu")
    assert str(caught.value).startswith(words)
    check_backend("gloo", "cpu")
    check_backend(None, "cpu")


@pytest.mark.parametrize("backend", ["nccl", "bogus"])
def test_distributed_with_a_backend_it_cannot_use_is_one_line_before_spawning(
        tmp_path, coco128, backend):
    result = run_train(write_config(tmp_path, coco128), "--distributed", "--world-size", "1",
                       "--procs-per-node", "2", "--dist-backend", backend, inproc=True)
    one_line_error(result, f"--dist-backend {backend}" if backend == "nccl"
                   else f"--dist-backend '{backend}' is not a process-group backend")
    assert "error: rank" not in result.stderr  # found by the launcher, not inside the ranks

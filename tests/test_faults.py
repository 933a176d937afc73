"""The fault suite: each case runs train.py (or test.py / demo.py) as a real subprocess and checks
the exit code, the one-line message (no traceback) and what is left: files and processes.

The README's reliability table lists these cases; keep the two in step.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests._train_helpers import Training, alive, losses, run_train, write_config

NAME = "Tiny128"


def one_line_error(result, *words):
    """The run failed with exit 2 and one line naming `words`, and no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0], (word, errors[0])


def wait_gone(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(pids)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP])
def test_no_process_of_the_run_outlives_its_trainer(tmp_path, coco128, signum):
    """kill -9 (the OOM killer) or SIGHUP (a closed terminal): every process the run started,
    found by walking its tree while it ran, is gone 10 s later."""
    config_dir = write_config(tmp_path, coco128, max_iter=100000, snapshot=100000, val_iter=3)
    run = Training(config_dir)
    try:
        run.wait_for(r"iteration 4: loss")
        tree = set(run.seen)
        assert len(tree) >= 3  # the fork server and the prefetch workers at least
        run.proc.send_signal(signum)
        code, _, output = run.finish(timeout=60)
    finally:
        run.kill()
    assert not wait_gone(tree, 10), [p for p in alive(tree)]
    if signum == signal.SIGHUP:  # stops like SIGTERM: a snapshot of the last iteration
        assert code == 128 + signal.SIGHUP, output
        done = max(losses(output))
        assert (tmp_path / "cache" / "nnet" / NAME / f"{NAME}_{done}.pkl").is_file()
    else:
        assert code == -signal.SIGKILL


def test_non_positive_max_iter_is_one_line(tmp_path, coco128):
    result = run_train(write_config(tmp_path, coco128, max_iter=-5))
    one_line_error(result, "max_iter")

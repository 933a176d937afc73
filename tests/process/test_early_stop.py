"""A stop or resume signal in the first seconds of train.py (imports, data, the model) is
remembered: the run stops after its first iteration with a snapshot, never dies without a word.
Also the one rule for a second Ctrl-C, in-process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from core.engine import stop as stops
from core.engine.stop import RESUME_STATUS, StopRequest
from core.errors import Stopped
from tests._train_helpers import REPO, Training, write_config

SMALL = {"input_size": [64, 64], "output_sizes": [[16, 16]]}
ONE_WORKER = ("--workers", "1")  # a prefetch process is started all the same: one is enough


def interpreter_start() -> float:
    """Seconds a fresh interpreter needs on this machine, now, to reach the early catch."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "from core.engine.stop import catch_early"],
                   cwd=REPO, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return time.monotonic() - t0


@pytest.fixture
def long_run(tmp_path, coco128):
    """A run of 40 iterations whose periodic snapshots never come: a snapshot is the stop's."""
    return tmp_path, write_config(tmp_path, coco128, db=SMALL, max_iter=40, snapshot=100,
                                  val_iter=0, display=1)


def assert_stopped_after_iteration_1(root, code, output, status):
    snapshot = root / "cache" / "nnet" / "Tiny128" / "Tiny128_1.pkl"
    assert code == status, output[-3000:]
    assert "stopped by signal after iteration 1; snapshot" in output, output[-3000:]
    assert torch.load(snapshot, weights_only=True)["iteration"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("when", [0.2, 1.0, "training images: "])
def test_a_resume_signal_during_start_up_stops_after_the_first_iteration(long_run, when):
    """0.2 s is inside the interpreter's own start-up on a loaded machine (0.4 s at load 7 on
    2 cores), where no Python code can catch anything yet; the signal is then sent as soon as
    a fresh interpreter reaches the catch here, measured just before. 1.0 s falls in the
    imports; the line "training images:" comes while the data and the model are being set up,
    before the first batch (a fixed 3 s did, until the workers stopped importing torch: then an
    idle machine had trained 11 iterations by then)."""
    root, config_dir = long_run
    wait = max(when, 1.5 * interpreter_start()) if isinstance(when, float) else 0.0
    run = Training(config_dir, *ONE_WORKER)
    try:
        if isinstance(when, str):
            run.wait_for(when)
        time.sleep(wait)
        run.proc.send_signal(signal.SIGUSR1)
        code, _, output = run.finish(timeout=240)
    finally:
        run.kill()
    assert_stopped_after_iteration_1(root, code, output, RESUME_STATUS)


@pytest.mark.slow
def test_a_signal_before_the_interpreter_runs_waits_when_the_launcher_blocks_it(long_run):
    """A launcher that blocks the signals before exec loses none: SIGTERM at once."""
    root, config_dir = long_run
    blocked = {signal.SIGTERM, signal.SIGUSR1}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)  # this test is the launcher
    try:
        run = Training(config_dir, *ONE_WORKER)  # the child starts with the mask of its parent
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
    try:
        run.proc.send_signal(signal.SIGTERM)
        code, _, output = run.finish(timeout=240)
    finally:
        run.kill()
    assert_stopped_after_iteration_1(root, code, output, 128 + signal.SIGTERM)


@pytest.mark.slow
def test_a_stop_during_a_dry_run_ends_it_in_one_line(long_run):
    _, config_dir = long_run
    run = Training(config_dir, "--dry-run", "100000", *ONE_WORKER)
    try:
        time.sleep(max(1.0, 1.5 * interpreter_start()))
        run.proc.send_signal(signal.SIGTERM)
        code, _, output = run.finish(timeout=240)
    finally:
        run.kill()
    assert code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM: a dry run has nothing to save" in output


def test_an_early_stop_is_taken_over_and_a_second_early_ctrl_c_hurries(restore_handlers,
                                                                       monkeypatch):
    monkeypatch.setattr(stops, "_early", [])
    stops.catch_early()
    os.kill(os.getpid(), signal.SIGTERM)
    request = StopRequest(signal.SIGUSR1)
    assert request() and request.exit_status == 128 + signal.SIGTERM
    stops.catch_early()
    os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)


def test_one_rule_for_a_second_ctrl_c_in_the_loop_and_in_test_py(restore_handlers):
    loop = StopRequest(signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGINT)  # the first asks; the loop stops at its end
    assert loop() and loop.exit_status == 128 + signal.SIGINT
    with loop.finishing():
        os.kill(os.getpid(), signal.SIGINT)  # not while the stop snapshot is written
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)

    at_once = StopRequest(at_once=True)
    with pytest.raises(Stopped) as stopped:
        os.kill(os.getpid(), signal.SIGINT)
    assert stopped.value.signum == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)  # any other repeat is the same request again
    assert at_once.signum == signal.SIGTERM

"""train.py end to end on coco128 with CornerNet_Tiny: snapshots, exact resume, failures.

One plain run is a real `python train.py` process, as the README's command starts it; so are the
cases of signals, kills and the spawn launcher (all `slow`). The rest run train.py's command line
in this process (`run_train(..., inproc=True)`): same arguments, same output, same files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from _faults import wait_gone
from _train_helpers import (
    REPO,
    Training,
    copy_snapshot,
    losses,
    run_spawned,
    run_train,
    write_config,
)

from core.utils.threads import training_share

NAME = "Tiny128"


def snapshot(tmp, iteration, cache="cache"):
    return tmp / cache / "nnet" / NAME / f"{NAME}_{iteration}.pkl"


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.slow  # the one plain train.py process: the README's command as a user runs it
def test_snapshots_appear_at_configured_iterations_and_load(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=4, snapshot=2)
    result = run_train(config_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    found = sorted(p.name for p in (tmp_path / "cache" / "nnet" / NAME).glob("*.pkl"))
    assert found == [f"{NAME}_2.pkl", f"{NAME}_4.pkl"]
    state = load(snapshot(tmp_path, 4))
    assert state["iteration"] == 4
    assert state["config"]["system"]["batch_size"] == 4
    assert state["data"]["next_batch"] == 4
    assert set(losses(result.stdout)) == {1, 2, 3, 4}
    assert "validation loss" in result.stdout


@pytest.mark.slow  # two runs in-process, of six iterations and three
def test_resume_continues_exactly(tmp_path, coco128):
    """detectron2's resume test in our terms: a tiny run's snapshot at 3 resumed to 6 gives the
    uninterrupted run's losses, weights and optimizer state, bit for bit."""
    config_dir = write_config(tmp_path, coco128, max_iter=6, snapshot=3, stepsize=2)
    straight = run_train(config_dir, inproc=True)
    assert straight.returncode == 0, straight.stdout + straight.stderr

    resumed_dir = write_config(tmp_path / "resumed", coco128, max_iter=6, snapshot=3,
                               stepsize=2)
    copy_snapshot(tmp_path / "cache", tmp_path / "resumed" / "cache", NAME, 3)
    resumed = run_train(resumed_dir, "--iter", "3", inproc=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    first, second = losses(straight.stdout), losses(resumed.stdout)
    assert sorted(second) == [4, 5, 6]
    assert {it: first[it] for it in (4, 5, 6)} == second
    a = load(snapshot(tmp_path, 6))
    b = load(snapshot(tmp_path / "resumed", 6))
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for key, state in a["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(
                b["optimizer"]["state"][key][name])), (key, name)


def test_initialize_writes_snapshot_zero_without_reading_images(tmp_path, coco128):
    # Every image of this dataset is unreadable: any sampling at all would fail the run.
    empty = tmp_path / "no_images"
    empty.mkdir()
    config_dir = write_config(tmp_path, coco128, images=empty, strict_images=True)
    result = run_train(config_dir, "--initialize", inproc=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert load(snapshot(tmp_path, 0))["iteration"] == 0
    assert "iteration 1" not in result.stdout


def _broken_dataset(tmp_path, coco128, broken: str):
    images = tmp_path / "images"
    shutil.copytree(coco128 / "images", images)
    data = (images / broken).read_bytes()
    (images / broken).write_bytes(data[: len(data) // 3])
    return images


@pytest.mark.slow
def test_failing_worker_stops_training_with_its_traceback(tmp_path, coco128):
    # The trainer's probe batch reads the first images in file order; this one comes later.
    broken = "000000000400.jpg"
    images = _broken_dataset(tmp_path, coco128, broken)
    config_dir = write_config(tmp_path, coco128, images=images, strict_images=True,
                              max_iter=1000, batch_size=8, val_iter=0)
    run = Training(config_dir)
    try:
        code, _, output = run.finish(timeout=120)
    finally:
        run.kill()
    assert code != 0
    assert "Traceback" in output and "ImageReadError" in output
    assert broken in output
    assert not wait_gone(run.seen, 10), "child processes left behind"


@pytest.mark.slow
def test_killed_worker_is_noticed(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=100000, val_iter=0, snapshot=100000)
    run = Training(config_dir)
    try:
        run.wait_for(r"iteration 2: loss")
        workers = run.workers()
        # --workers 2, less where the CPUs are fewer than the workers and the trainer: one on 2
        assert len(workers) == training_share(2).workers
        victim = workers[0]
        os.kill(victim, signal.SIGKILL)
        code, _, output = run.finish(timeout=30)  # noticed: the run ends, not waits forever
    finally:
        run.kill()
    assert code != 0
    assert "SIGKILL" in output
    assert not wait_gone(run.seen, 10)  # the fork server ends once it sees its trainer gone


@pytest.mark.slow
def test_sigterm_writes_a_loadable_snapshot_and_exits(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, max_iter=100000, snapshot=100000, val_iter=5)
    run = Training(config_dir)
    try:
        run.wait_for(r"iteration 3: loss")
        run.proc.send_signal(signal.SIGTERM)
        code, seconds, output = run.finish(timeout=30)
    finally:
        run.kill()
    assert seconds < 30
    assert code == 128 + signal.SIGTERM
    done = max(losses(output))
    state = load(snapshot(tmp_path, done))
    assert state["iteration"] == done
    assert not wait_gone(run.seen, 10)  # the fork server ends once it sees its trainer gone


# One process imports torch once and forks a writer for each line it reads: the writer saves
# in a loop, says its pid after its first complete write, and is killed by the test; the parent
# says "gone" once it has reaped it.
_WRITER = """
import os, sys, torch
from pathlib import Path
from core.utils.files import write_atomic
path = Path(sys.argv[1])
big = {"model": {f"w{i}": torch.full((256, 1024), float(i)) for i in range(40)}}
for _ in sys.stdin:
    pid = os.fork()
    if pid == 0:
        i = 0
        while True:
            big["iteration"] = i
            write_atomic(big, path)
            i += 1
            if i == 1:
                print(os.getpid(), flush=True)
    os.waitpid(pid, 0)
    print("gone", flush=True)
"""


@pytest.mark.slow
def test_kill_during_snapshot_write_never_leaves_a_torn_snapshot(tmp_path):
    path = tmp_path / "snap.pkl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # no thread pool in the process that forks
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], cwd=REPO, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    writer = None
    try:
        for delay in (0.3, 0.45, 0.6, 0.8):
            proc.stdin.write("write\n")
            proc.stdin.flush()
            writer = int(proc.stdout.readline())  # at least one complete write exists
            time.sleep(delay)
            os.kill(writer, signal.SIGKILL)
            assert proc.stdout.readline().strip() == "gone"
            writer = None  # reaped by its parent
            state = load(path)
            assert torch.equal(state["model"]["w7"], torch.full((256, 1024), 7.0))
    finally:
        proc.kill()
        if writer is not None:  # a writer still alive would hold the pipe communicate reads
            with contextlib.suppress(ProcessLookupError):
                os.kill(writer, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert [p.name for p in tmp_path.iterdir()] == ["snap.pkl"] or all(
        p.name.startswith(".") for p in tmp_path.iterdir() if p.name != "snap.pkl")


@pytest.mark.slow
def test_two_gloo_processes_equal_one_process_with_the_same_chunks(tmp_path, coco128, capfd):
    common = {"max_iter": 3, "snapshot": 3, "val_iter": 0, "batch_size": 4}
    one = write_config(tmp_path / "one", coco128, chunk_sizes=[2, 2], **common)
    two = write_config(tmp_path / "two", coco128, **common)
    single = run_train(one, inproc=True)
    assert single.returncode == 0, single.stdout + single.stderr
    double = run_spawned(two, 2, "--workers", "1", capfd=capfd)
    assert double.returncode == 0, double.stdout + double.stderr
    assert "parameters agree on 2 ranks" in double.stdout
    a = load(snapshot(tmp_path / "one", 3))["model"]
    b = load(snapshot(tmp_path / "two", 3))["model"]
    # Parameters, not BN running statistics: DDP broadcasts rank 0's buffers, whereas one
    # process updates them chunk after chunk.
    params = [key for key in a if not key.endswith(("running_mean", "running_var",
                                                    "num_batches_tracked"))]
    assert len(params) > 50
    for key in params:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.slow  # trains in-process until the loss overflows
def test_non_finite_loss_stops_naming_iteration_and_terms(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, learning_rate=1e30, max_iter=50, val_iter=0,
                              snapshot=1000)
    result = run_train(config_dir, inproc=True)
    assert result.returncode == 1
    message = result.stderr
    assert "the loss is not finite" in message
    assert "focal=" in message and "pull=" in message and "push=" in message
    assert re.search(r"iteration \d+:", message)


def test_unknown_config_key_fails_before_any_process(tmp_path, coco128):
    import json

    config_dir = write_config(tmp_path, coco128)
    path = config_dir / f"{NAME}.json"
    config = json.loads(path.read_text())
    config["system"]["learning_rat"] = 0.1
    path.write_text(json.dumps(config))
    result = run_train(config_dir, inproc=True)
    assert result.returncode == 2
    assert "learning_rat" in result.stderr and "learning_rate" in result.stderr


def test_missing_snapshot_is_a_clear_error(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128)
    result = run_train(config_dir, "--iter", "7", inproc=True)
    assert result.returncode == 2
    assert "no snapshot for iteration 7" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # six iterations in-process
def test_skipped_non_finite_steps_still_reach_the_final_snapshot(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, learning_rate=1e30, max_iter=6, val_iter=0,
                              snapshot=3, nonfinite_loss="skip")
    result = run_train(config_dir, inproc=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "non-finite loss" in result.stdout and "step skipped" in result.stdout
    assert load(snapshot(tmp_path, 6))["iteration"] == 6
    assert snapshot(tmp_path, 3).is_file()

"""Training with any process count under every launcher, on CPU with gloo (tiny model, coco128).

The parity tests train with SGD: Adam's first step moves every parameter by +-lr whatever the
gradient's scale, so it could not tell a correctly weighted loss from one off by a factor, and
it turns the float noise of gradients near zero into steps of lr. Under SGD a step is lr times
the gradient, so the parameters after one step compare the gradients themselves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import torch
from _train_helpers import (
    Training,
    alive,
    children,
    copy_snapshot,
    losses,
    node_cmd,
    of_the_run,
    parent,
    run_spawned,
    run_train,
    torchrun_cmd,
    write_config,
)

from core.utils.dist import free_port

# The launchers' runs are real process trees and `slow`; the one-process references, the
# refusal before any rank and the launcher of the spawned ranks where neither a signal nor a
# kill is sent to it run train.py's command line in this process (run_train inproc,
# run_spawned: the ranks are spawned processes all the same).
# The ranks read with one prefetch worker each (--workers 1): on 2 cores, 3 ranks of 2 workers
# each were a fifth of a run's time; the data a rank reads does not depend on the worker count
# (the torchrun run, always of one worker, trains like the one process of 2 workers).

NAME = "Tiny128"
CORNERNET_CHUNKS = {"batch_size": 49, "chunk_sizes": [4] + [5] * 9}  # configs/CornerNet.json
SQUEEZE_CHUNKS = {"batch_size": 55, "chunk_sizes": [13, 14, 14, 14]}  # CornerNet_Squeeze.json
SMALL = {"input_size": [64, 64], "output_sizes": [[16, 16]]}
PARITY = {"opt_algo": "sgd", "learning_rate": 0.01, "max_iter": 2, "snapshot": 1,
          "val_iter": 0, "display": 1}


def snapshot(root, iteration):
    path = root / "cache" / "nnet" / NAME / f"{NAME}_{iteration}.pkl"
    return torch.load(path, map_location="cpu", weights_only=True)


def worst_difference(a: dict, b: dict) -> float:
    """max over float tensors of max|a - b| / max|a|; integer buffers must be equal."""
    worst = 0.0
    for key, value in a.items():
        if not value.is_floating_point():
            assert torch.equal(value, b[key]), key
            continue
        scale = value.abs().max().clamp(min=1e-12)
        worst = max(worst, ((value - b[key]).abs().max() / scale).item())
    return worst


def assert_same_training(reference, other, first=1e-5, second=1e-2):
    """After iteration 1 within `first` relative (float summation noise), after iteration 2
    within `second` (the second step amplifies that noise); BN running statistics included."""
    assert worst_difference(snapshot(reference, 1)["model"], snapshot(other, 1)["model"]) < first
    assert worst_difference(snapshot(reference, 2)["model"], snapshot(other, 2)["model"]) < second


def run_nodes(config_dir, *extra, env=None, timeout=240):
    """Two nodes on localhost, one process each; returns their (status, output) pairs."""
    port = free_port()
    nodes = [Training(config_dir, cmd=node_cmd(config_dir, node, port, *extra), env=env)
             for node in (0, 1)]
    out = []
    for node in nodes:
        stdout, _ = node.proc.communicate(timeout=timeout)
        out.append((node.proc.returncode, stdout.decode(errors="replace")))
    return out


@pytest.fixture(scope="module")
def cornernet_one(tmp_path_factory, coco128):
    """One process on the shipped CornerNet chunks: the reference run."""
    root = tmp_path_factory.mktemp("one")
    result = run_train(write_config(root, coco128, db=SMALL, **CORNERNET_CHUNKS, **PARITY),
                       inproc=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return root, result


@pytest.mark.slow
def test_one_process_steps_are_large_against_the_tolerance(cornernet_one):
    root, _ = cornernet_one
    # The comparisons below mean something only if a step moves the parameters far more.
    first, second = snapshot(root, 1)["model"], snapshot(root, 2)["model"]
    moved = max(((first[k] - second[k]).abs().max() / first[k].abs().max()).item()
                for k in first if first[k].is_floating_point())
    assert moved > 1e-2


@pytest.mark.slow
def test_three_spawned_processes_train_like_one(tmp_path, coco128, cornernet_one, capfd):
    reference, single = cornernet_one
    config_dir = write_config(tmp_path, coco128, db=SMALL, **CORNERNET_CHUNKS, **PARITY)
    result = run_spawned(config_dir, 3, "--workers", "1", capfd=capfd)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "processes: 3, global batch 49 in chunks [4, 5, 5, 5, 5, 5, 5, 5, 5, 5], " \
           "rank 0 runs [4, 5, 5, 5]" in result.stdout
    assert_same_training(reference, tmp_path)
    # The printed loss is the mean over all chunks, as one process prints it.
    one, three = losses(single.stdout), losses(result.stdout)
    assert float(three[1]) == pytest.approx(float(one[1]), rel=1e-5)


@pytest.mark.slow
def test_torchrun_two_processes_train_like_one(tmp_path, coco128, cornernet_one):
    reference, _ = cornernet_one
    config_dir = write_config(tmp_path, coco128, db=SMALL, **CORNERNET_CHUNKS, **PARITY)
    result = run_train(config_dir, cmd=torchrun_cmd(config_dir, 2, "--workers", "1"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "processes: 2" in result.stdout
    assert_same_training(reference, tmp_path)


@pytest.mark.slow
def test_two_nodes_on_localhost_train_like_one(tmp_path, coco128, cornernet_one):
    reference, _ = cornernet_one
    config_dir = write_config(tmp_path, coco128, db=SMALL, **CORNERNET_CHUNKS, **PARITY)
    (status0, out0), (status1, out1) = run_nodes(config_dir, "--workers", "1")
    assert (status0, status1) == (0, 0), out0 + out1
    assert "processes: 2" in out0
    assert_same_training(reference, tmp_path)


@pytest.mark.slow
def test_squeeze_chunks_on_three_processes_train_like_one(tmp_path, coco128, capfd):
    one = write_config(tmp_path / "one", coco128, db=SMALL, **SQUEEZE_CHUNKS, **PARITY)
    three = write_config(tmp_path / "three", coco128, db=SMALL, **SQUEEZE_CHUNKS, **PARITY)
    single = run_train(one, inproc=True)
    assert single.returncode == 0, single.stdout + single.stderr
    result = run_spawned(three, 3, "--workers", "1", capfd=capfd)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 runs [13, 14]" in result.stdout
    assert_same_training(tmp_path / "one", tmp_path / "three")


@pytest.mark.slow
def test_resuming_with_another_process_count_continues_the_same_training(
        tmp_path, coco128, cornernet_one, capfd):
    reference, single = cornernet_one
    config_dir = write_config(tmp_path, coco128, db=SMALL, **CORNERNET_CHUNKS, **PARITY)
    copy_snapshot(reference / "cache", tmp_path / "cache", NAME, 1)
    result = run_spawned(config_dir, 2, "--iter", "1", "--workers", "1", capfd=capfd)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "note: snapshot 1 was trained with the chunks" not in result.stdout
    # One step from the same state: only float summation noise apart.
    assert worst_difference(snapshot(reference, 2)["model"], snapshot(tmp_path, 2)["model"]) \
        < 1e-5
    assert float(losses(result.stdout)[2]) == pytest.approx(float(losses(single.stdout)[2]),
                                                            rel=1e-5)


@pytest.mark.slow
def test_fewer_chunks_than_processes_are_re_chunked_and_said(tmp_path, coco128, capfd):
    config_dir = write_config(tmp_path, coco128, db=SMALL, batch_size=5, max_iter=1,
                              snapshot=1, val_iter=0)
    result = run_spawned(config_dir, 2, "--workers", "1", capfd=capfd)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("is cut into 2 chunks [3, 2]") == 1


def test_a_batch_smaller_than_the_process_count_fails_before_any_process(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, db=SMALL, batch_size=2)
    result = run_train(config_dir, "--distributed", "--world-size", "1", "--procs-per-node", "3",
                       inproc=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        ("error: system.batch_size 2 cannot be dealt to 3 processes: every process needs at "
         "least one image; use at least 3 images or fewer processes (--procs-per-node)")]
    assert "system config" not in result.stdout


@pytest.mark.slow
def test_a_bad_key_with_two_processes_prints_one_line_and_starts_nothing(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, db=SMALL, batch_sizes=4)
    run = Training(config_dir, "--distributed", "--world-size", "1", "--procs-per-node", "2")
    status, _, output = run.finish(timeout=60)
    assert status == 2
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "batch_sizes" in lines[0] and "batch_size" in lines[0]
    assert not run.seen  # no process was started


def _wait_for_ranks(run: Training, count: int, timeout: float = 60) -> list[int]:
    """The training processes (children of train.py that are not its fork server)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = [pid for pid in of_the_run(children(run.proc.pid)) if parent(pid) == run.proc.pid]
        if len(ranks) >= count:
            return sorted(ranks)
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} ranks started")


@pytest.mark.slow
def test_a_killed_rank_ends_the_run_within_seconds_and_leaves_nothing(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, db=SMALL, batch_size=4, max_iter=10000,
                              val_iter=0, snapshot=10000)
    run = Training(config_dir, "--distributed", "--world-size", "1", "--procs-per-node", "2",
                   "--workers", "1")
    try:
        run.wait_for(r"iteration 2: loss")
        ranks = _wait_for_ranks(run, 2)
        run.seen |= children(run.proc.pid)
        os.kill(ranks[1], signal.SIGKILL)
        status, waited, output = run.finish(timeout=30)
    finally:
        run.kill()
    assert status != 0
    assert waited < 10
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert errors[0].startswith("error: rank 1 (pid") and "SIGKILL" in errors[0]
    deadline = time.monotonic() + 10
    while alive(run.seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(run.seen), f"left behind: {sorted(alive(run.seen))}"


@pytest.mark.slow
def test_a_failing_rank_on_another_node_stops_this_node_naming_it(tmp_path, coco128):
    """Node 1's rank loses a prefetch worker and fails: node 0 learns why through the store
    and stops within seconds, though nothing of node 0 failed."""
    config_dir = write_config(tmp_path, coco128, db=SMALL, batch_size=4, max_iter=10000,
                              val_iter=0, snapshot=10000)
    port = free_port()
    nodes = [Training(config_dir, cmd=node_cmd(config_dir, node, port, "--workers", "1"))
             for node in (0, 1)]
    try:
        nodes[0].wait_for(r"iteration 2: loss")
        rank1 = _wait_for_ranks(nodes[1], 1)[0]
        nodes[1].seen |= children(nodes[1].proc.pid)
        workers = [pid for pid in children(rank1) if parent(pid) != rank1]  # the server's
        os.kill(workers[0], signal.SIGKILL)
        status1, _, out1 = nodes[1].finish(timeout=30)
        status0, waited0, out0 = nodes[0].finish(timeout=30)
    finally:
        for node in nodes:
            node.kill()
    assert status1 == 1 and "error: rank 1: training stopped: prefetch worker" in out1
    assert status0 != 0 and waited0 < 10
    first = next(line for line in out0.splitlines() if line.startswith("error:"))
    assert "rank 1" in first and "training stopped" in first, out0


@pytest.mark.slow
def test_a_frozen_rank_is_noticed_by_its_heartbeat(tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, db=SMALL, batch_size=4, max_iter=10000,
                              val_iter=0, snapshot=10000)
    port = free_port()
    env = {"CORNERNET_HEARTBEAT_S": "3"}
    nodes = [Training(config_dir, cmd=node_cmd(config_dir, node, port, "--workers", "1"), env=env)
             for node in (0, 1)]
    try:
        nodes[0].wait_for(r"iteration 2: loss")
        rank1 = _wait_for_ranks(nodes[1], 1)[0]
        os.kill(rank1, signal.SIGSTOP)
        status0, waited0, out0 = nodes[0].finish(timeout=60)
    finally:
        for node in nodes:
            node.kill()
        subprocess.run(["pkill", "-KILL", "-P", str(rank1)], check=False)
        os.kill(rank1, signal.SIGKILL)
    assert status0 != 0 and waited0 < 15
    assert "rank 1: stopped answering for 3 s" in out0


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["spawn", "torchrun"])
def test_sigterm_writes_the_last_iteration_under_every_launcher(tmp_path, coco128, launcher):
    config_dir = write_config(tmp_path, coco128, db=SMALL, batch_size=4, max_iter=10000,
                              val_iter=0, snapshot=10000)
    cmd = (torchrun_cmd(config_dir, 2, "--workers", "1") if launcher == "torchrun" else None)
    run = Training(config_dir, "--distributed", "--world-size", "1", "--procs-per-node", "2",
                   "--workers", "1", cmd=cmd)
    try:
        run.wait_for(r"iteration 3: loss")
        run.seen |= children(run.proc.pid)
        run.proc.send_signal(signal.SIGTERM)
        status, waited, output = run.finish(timeout=60)
    finally:
        run.kill()
    assert status != 0 and waited < 30
    stopped = [line for line in output.splitlines() if "stopped by signal after iteration" in line]
    assert len(stopped) == 1, output
    iteration = int(stopped[0].split("after iteration ")[1].split(";")[0])
    assert snapshot(tmp_path, iteration)["iteration"] == iteration
    deadline = time.monotonic() + 1  # what the run left has 1 s to go
    while alive(run.seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(run.seen), f"left behind: {sorted(alive(run.seen))}"



def test_the_cause_is_a_silent_kill_else_the_first_report_else_the_exit_status():
    from types import SimpleNamespace

    from core.engine.launch import _cause

    procs = [SimpleNamespace(pid=100 + i, exitcode=None) for i in range(3)]
    procs[1].exitcode = -signal.SIGKILL
    assert _cause(procs, [procs[1]], [(2, "lost contact")], 4).startswith(
        "error: rank 5 (pid 101) was killed by SIGKILL")
    # A rank that reported its own error and then died tearing down: its report is the cause.
    assert _cause(procs, [procs[1]], [(2, "lost contact"), (1, "WorkerError: x")], 4) == \
        "error: rank 5: WorkerError: x"
    procs[1].exitcode = 1
    assert _cause(procs, [procs[1]], [(2, "error: rank 6: y")], 4) == "error: rank 6: y"
    assert _cause(procs, [procs[1]], [], 4) == \
        "error: rank 5 (pid 101) exited with status 1 without a report"

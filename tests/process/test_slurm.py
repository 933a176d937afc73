"""train.py under a real single-node SLURM (tests/_slurm.py): srun as the launcher, the
tools/slurm/train.sbatch template, and jobs that are signalled, requeue themselves and resume.

Two CPU tasks with gloo stand for two GPUs (the fixture's node counts two GPUs without devices,
so the template's --gpus-per-node is granted unchanged). SGD, so that a step is lr times the
gradient: equal parameters mean equal gradients at every step.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from _resume import (
    NAME,
    SGD,
    SMALL,
    assert_equal_params,
    assert_one_record,
    metrics,
    snapshot,
    spawned_reference,
)
from _slurm import GPUS
from _train_helpers import REPO, cmdline, write_config

TEMPLATE = REPO / "tools" / "slurm" / "train.sbatch"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def submit(cluster, config_dir: Path, out: Path, *options: str,
           python: str = sys.executable) -> int:
    """sbatch of the template, unchanged, with 2 CPU tasks: resources given on the command line
    override the template's own #SBATCH lines. `python`: what the template runs train.py with
    (its PYTHON)."""
    return cluster.sbatch(
        f"--chdir={REPO}", "--ntasks-per-node=2", f"--gpus-per-node={GPUS}",
        "--cpus-per-task=1", f"--output={out}", "--open-mode=append",
        f"--export=ALL,PYTHON={python},OMP_NUM_THREADS=1", *options, str(TEMPLATE),
        NAME, "--config-dir", str(config_dir), "--workers", "1", "--device", "cpu")


def one_cpu_python(folder: Path) -> str:
    """A python held to one CPU at nice 10, for a job that trains only to be signalled: while
    the test waits up to half a minute for SLURM's clock, its two tasks would keep two cores
    busy (all of CI's), and every iteration they train is one more for the uninterrupted
    reference to repeat. On one CPU, below the other tests, they train at half the pace and
    take what the other tests leave."""
    path = folder / "python-one-cpu"
    cpu = max(os.sched_getaffinity(0))
    path.write_text(f'#!/bin/sh\nexec nice -n 10 taskset -c {cpu} "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return str(path)


def wait_for_line(path: Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file():
            for line in path.read_text(errors="replace").replace("\r", "\n").splitlines():
                if text in line:
                    return line
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in {path}:\n"
                         + (path.read_text(errors="replace")[-3000:] if path.is_file() else ""))


def leftovers(root: Path) -> list[str]:
    """Processes whose command line names this test's folder."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and str(root) in cmdline(int(entry.name)):
            found.append(f"{entry.name}: {cmdline(int(entry.name))}")
    return found


def assert_no_leftovers(root: Path, within: float = 2.0) -> None:
    """No process of the job (its command line names `root`) is left `within` seconds after
    it ended: the processes are looked for until they are gone, for `within` s at most."""
    deadline = time.monotonic() + within
    while (found := leftovers(root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not found, found


@pytest.fixture(scope="module")
def uninterrupted_14(tmp_path_factory, coco128) -> Iterator[Future]:
    """The 14 iterations of the requeue tests trained without interruption by our own launcher
    (2 processes), with a snapshot every 2: the run each of them must end as, trained once for
    all, on a thread while SLURM runs the jobs (`.result()` is its folder)."""
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(spawned_reference, tmp_path_factory.mktemp("spawn"), coco128,
                          max_iter=14, snapshot=2)


@dataclass
class Requeued:
    """The job of `usr1_requeued`: its folder, id, output, last state, the iteration its first
    run stopped after, and its processes left 2 s after it ended."""

    root: Path
    job: int
    text: str
    state: dict
    iteration: int
    leftovers: list[str]


@pytest.fixture(scope="module")
def usr1_requeued(slurm, tmp_path_factory, coco128, uninterrupted_14) -> Requeued:
    """The template with 2 tasks, 14 iterations and a snapshot every 2, sent `scancel
    --signal=USR1 --full` after iteration 4: it snapshots, requeues itself, and its second run
    finishes the training. One job for two tests: the tasks train as two spawned processes do,
    and the interrupted run ends as the uninterrupted one."""
    tmp = tmp_path_factory.mktemp("usr1")
    root = tmp / "slurm"
    config_dir = write_config(root, coco128, db=SMALL, **SGD, max_iter=14, snapshot=2)
    out = tmp / "job.out"
    job = submit(slurm, config_dir, out, "--time=10")
    wait_for_line(out, "iteration 4: loss", timeout=240)
    slurm.cmd("scancel", "--signal=USR1", "--full", str(job))
    stopped = wait_for_line(out, "stopped by signal after iteration", timeout=60)
    iteration = int(stopped.split("after iteration ")[1].split(";")[0])
    state = requeued_and_finished(slurm, job, timeout=300)
    deadline = time.monotonic() + 2
    while (found := leftovers(tmp)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return Requeued(root, job, out.read_text(errors="replace"), state, iteration, found)


def seconds(duration: str) -> int:
    """SLURM's [days-]hours:minutes:seconds (a RunTime) in seconds."""
    days, _, clock = duration.rpartition("-")
    hours, minutes, secs = map(int, clock.split(":"))
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + secs


def requeued_and_finished(cluster, job: int, timeout: float) -> dict:
    state = cluster.wait(job, lambda s: s.get("Restarts", "0") != "0"
                         and s.get("JobState") in {"COMPLETED", "FAILED", "CANCELLED"}, timeout)
    return state


def test_template_with_two_tasks_trains_like_two_spawned_processes(usr1_requeued,
                                                                   uninterrupted_14):
    run = usr1_requeued
    assert run.state["JobState"] == "COMPLETED", run.text[-3000:]
    assert "processes: 2, global batch 4 in chunks [2, 2]" in run.text
    files = sorted(p.name for p in (run.root / "cache/nnet" / NAME).glob("*.pkl"))
    # one set of snapshots, not one per task: every 2 iterations, and the stop's
    assert files == sorted(f"{NAME}_{i}.pkl" for i in {*range(2, 15, 2), run.iteration})
    for iteration in (2, 4):  # the first run's, before the signal
        assert_equal_params(snapshot(run.root, iteration)["model"],
                            snapshot(uninterrupted_14.result(), iteration)["model"])


def test_scancel_usr1_snapshots_requeues_and_the_second_job_finishes_the_same_run(
        usr1_requeued, uninterrupted_14):
    run = usr1_requeued
    assert 4 <= run.iteration < 14
    assert run.state["JobState"] == "COMPLETED" and run.state["Restarts"] == "1", \
        run.text[-3000:]
    assert f"requeued SLURM job {run.job}" in run.text
    assert f"continuing from snapshot {run.iteration}" in run.text
    assert_equal_params(snapshot(run.root, 14)["model"],
                        snapshot(uninterrupted_14.result(), 14)["model"])
    assert_one_record(run.root, 14)
    lines = metrics(run.root)
    resumed = next(line for line in lines if line["iteration"] == run.iteration + 1)
    assert resumed["time"] > next(line["time"] for line in lines
                                  if line["iteration"] == run.iteration)
    assert not run.leftovers, run.leftovers


def test_a_time_limit_signal_snapshots_before_the_limit_and_the_requeued_job_finishes(
        slurm, tmp_path, coco128):
    """--signal=USR1@90 and, once the job trains, a time limit 50-110 s away: the only test that
    waits for SLURM's clock. slurmctld looks at time limits every 30 s and sends the signal at
    the first look within 90 + 30 s of the limit: 0-30 s after the limit is set, 20 s or more
    before it is reached. (Set at the submission, --time=1 with USR1@10 sent it 20-50 s after
    the start: on a loaded machine while the tasks were still starting, on an idle one after
    up to 40 s of training.) The run is long enough to be still training then; once its
    snapshot is on disk the test shortens the run to 4 more iterations (max_iter does not enter
    the arithmetic), so that the uninterrupted reference stays small."""
    root = tmp_path / "slurm"
    config_dir = write_config(root, coco128, db=SMALL, **SGD, max_iter=100000, snapshot=100000)
    out = tmp_path / "job.out"
    job = submit(slurm, config_dir, out, "--time=10", "--signal=USR1@90",
                 python=one_cpu_python(tmp_path))
    wait_for_line(out, "iteration 1: loss", timeout=240)
    ran = seconds(slurm.state(job)["RunTime"])
    slurm.cmd("scontrol", "update", f"JobId={job}", f"TimeLimit={math.ceil((ran + 50) / 60)}")
    stopped = wait_for_line(out, "stopped by signal after iteration", timeout=150)
    iteration = int(stopped.split("after iteration ")[1].split(";")[0])
    assert snapshot(root, iteration)["iteration"] == iteration
    last = iteration + 4
    write_config(root, coco128, db=SMALL, **SGD, max_iter=last, snapshot=100000)
    # The requeued job would get the same limit, and on a loaded machine spend it starting:
    # one limit is what this test is about, so the next job gets ten.
    slurm.cmd("scontrol", "update", f"JobId={job}", "TimeLimit=10")
    # the uninterrupted run trains while SLURM requeues the job (seconds of waiting)
    with ThreadPoolExecutor(1) as pool:
        training = pool.submit(spawned_reference, tmp_path / "spawn", coco128, max_iter=last,
                               snapshot=100000)
        state = requeued_and_finished(slurm, job, timeout=300)
        reference = training.result()
    text = out.read_text(errors="replace")
    assert state["JobState"] == "COMPLETED" and state["Restarts"] == "1", text[-3000:]
    assert "DUE TO TIME LIMIT" not in text  # the tasks ended themselves, before the limit
    assert_equal_params(snapshot(root, last)["model"], snapshot(reference, last)["model"])
    assert_one_record(root, last)


def test_a_task_count_the_batch_cannot_be_dealt_to_is_one_line_before_training(
        slurm, tmp_path, coco128):
    config_dir = write_config(tmp_path, coco128, db=SMALL, **{**SGD, "batch_size": 2})
    result = slurm.cmd("srun", "-n3", "--overcommit", f"--chdir={REPO}", sys.executable,
                       str(REPO / "train.py"), NAME, "--config-dir", str(config_dir),
                       "--distributed", "--workers", "1", "--device", "cpu", timeout=240,
                       check=False)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode != 0
    assert len(errors) == 1, result.stderr
    assert "3 processes" in errors[0] or "3 images" in errors[0], errors[0]
    assert "iteration 1" not in result.stdout


def test_submitit_requeues_through_its_checkpoint_and_the_run_ends_as_an_uninterrupted_one(
        slurm, tmp_path, coco128, monkeypatch, uninterrupted_14):
    """tools/submit.py: SIGUSR2 (what submitit asks SLURM for) snapshots on every rank, then
    submitit's own handler checkpoints and requeues; the resubmitted call resumes."""
    pytest.importorskip("submitit")
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    from cornernet.commands import submit

    root = tmp_path / "slurm"
    config_dir = write_config(root, coco128, db=SMALL, **SGD, max_iter=14, snapshot=100)
    folder = tmp_path / "submitit"
    args = submit.parse_args([NAME, "--gpus-per-node", str(GPUS), "--cpus-per-task", "1",
                              "--hours", "0.2", "--folder", str(folder), "--", "--config-dir",
                              str(config_dir), "--workers", "1", "--device", "cpu"])
    job = submit.executor(args).submit(submit.Training(args.cfg, args.train_args))
    log = folder / f"{job.job_id}_0_log.out"
    wait_for_line(log, "iteration 4: loss", timeout=240)
    slurm.cmd("scancel", "--signal=USR2", str(job.job_id))
    stopped = wait_for_line(log, "stopped by signal after iteration", timeout=60)
    iteration = int(stopped.split("after iteration ")[1].split(";")[0])
    state = requeued_and_finished(slurm, int(job.job_id), timeout=300)
    errors = (folder / f"{job.job_id}_0_log.err").read_text(errors="replace")
    assert state["JobState"] == "COMPLETED" and state["Restarts"] == "1", errors[-3000:]
    assert f"continuing from snapshot {iteration}" in log.read_text(errors="replace")
    assert_equal_params(snapshot(root, 14)["model"],
                        snapshot(uninterrupted_14.result(), 14)["model"])
    assert_one_record(root, 14)


def test_scancel_of_a_job_whose_resume_signal_is_term_leaves_it_cancelled(
        slurm, tmp_path, coco128):
    """stop_signal TERM and --requeue: scancel's SIGTERM stops the run with a snapshot, as the
    resume signal does, but the job is cancelled, so nobody requeues it."""
    root = tmp_path / "slurm"
    config_dir = write_config(root, coco128, db=SMALL, **SGD, max_iter=100000, snapshot=100000,
                              stop_signal="TERM")
    out = tmp_path / "job.out"
    job = submit(slurm, config_dir, out, "--time=10")
    wait_for_line(out, "iteration 3: loss", timeout=240)
    slurm.cmd("scancel", str(job))
    wait_for_line(out, f"SLURM job {job} is COMPLETING (cancelled by scancel", timeout=60)
    state = slurm.wait_done(job, timeout=120)
    # Only the job's own processes could requeue it, and `scontrol requeue` counts the restart
    # and queues the job at once: with all of them gone, the state is the last one.
    assert_no_leftovers(tmp_path)
    state = slurm.state(job) or state
    text = out.read_text(errors="replace")
    assert state["JobState"] == "CANCELLED" and state.get("Restarts", "0") == "0", text[-3000:]
    assert f"requeued SLURM job {job}" not in text


def test_a_task_that_dies_ends_the_job_step_at_once(slurm, tmp_path, coco128):
    """--kill-on-bad-exit=1 in the template: a rank killed by SIGKILL ends the step in seconds,
    although the peer watch is told to wait ten minutes (CORNERNET_HEARTBEAT_S=600)."""
    root = tmp_path / "slurm"
    config_dir = write_config(root, coco128, db=SMALL, **SGD, max_iter=100000, snapshot=100000)
    out = tmp_path / "job.out"
    job = slurm.sbatch(
        f"--chdir={REPO}", "--ntasks-per-node=2", f"--gpus-per-node={GPUS}",
        "--cpus-per-task=1", f"--output={out}", "--open-mode=append", "--time=10",
        f"--export=ALL,PYTHON={sys.executable},OMP_NUM_THREADS=1,CORNERNET_HEARTBEAT_S=600",
        str(TEMPLATE), NAME, "--config-dir", str(config_dir), "--workers", "1")
    wait_for_line(out, "iteration 3: loss", timeout=240)
    ranks = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()
             and "train.py" in cmdline(int(entry.name)) and str(config_dir) in
             cmdline(int(entry.name)) and b"SLURM_PROCID=1\0" in _environ(int(entry.name))]
    assert len(ranks) == 1, ranks
    killed = time.monotonic()
    os.kill(ranks[0], signal.SIGKILL)
    state = slurm.wait_done(job, timeout=120)
    assert time.monotonic() - killed < 90  # not the heartbeat's 600 s, not the time limit
    assert state["JobState"] in {"FAILED", "CANCELLED"}, out.read_text(errors="replace")[-3000:]
    assert_no_leftovers(tmp_path)


def _environ(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "environ").read_bytes() + b"\0"
    except OSError:
        return b""


def submit_py(cluster, tmp_path, *args: str):
    import subprocess
    return subprocess.run([sys.executable, str(REPO / "tools" / "submit.py"), *args,
                           "--folder", str(tmp_path / "submitit")],
                          env={**cluster.env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600, check=False, cwd=REPO)


def test_submit_py_a_refusal_by_sbatch_is_one_line(slurm, tmp_path):
    pytest.importorskip("submitit")
    done = submit_py(slurm, tmp_path, NAME, "--partition", "nowhere", "--hours", "0.2",
                     "--", "--config-dir", str(write_config(tmp_path, Path("/nonexistent"))))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: sbatch refused the job: ")
    assert "partition" in lines[0].lower()


"""SLURM placement from the environment, the resume signal, and snapshots by wall time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from types import SimpleNamespace
from urllib.parse import urlparse

import pytest
from _train_helpers import REPO, write_config

from core.config import ConfigError
from core.engine import cluster, preempt
from core.engine import stop as stops
from core.engine.snapshots import numbered, prune
from core.engine.stop import RESUME_STATUS, StopRequest

STEP = {"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "node7", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"}


def test_a_job_step_task_is_its_rank_and_meets_the_others_on_a_port_of_the_job():
    task = cluster.slurm_task(STEP)
    assert (task.rank, task.world, task.local, task.nodes) == (3, 8, 1, 2)
    port = cluster.derived_port("4242", None)
    assert task.url == f"tcp://node7:{port}"
    assert cluster.PORT_BASE <= port < cluster.PORT_BASE + cluster.PORT_SPAN
    # a requeued job (SLURM_RESTART_COUNT=1) does not meet its predecessor's socket
    assert cluster.derived_port("4242", "1") != port


def test_master_addr_and_port_win_over_the_node_list():
    task = cluster.slurm_task({**STEP, "MASTER_ADDR": "head", "MASTER_PORT": "29500"})
    assert task.url == "tcp://head:29500"


@pytest.mark.parametrize("addr", ["::1", "[::1]", "fe80::2"])
def test_an_ipv6_master_addr_makes_a_url_with_the_address_in_brackets(addr):
    task = cluster.slurm_task({**STEP, "MASTER_ADDR": addr, "MASTER_PORT": "29500"})
    host = addr.strip("[]")
    assert task.url == f"tcp://[{host}]:29500"
    parsed = urlparse(task.url)
    assert (parsed.hostname, parsed.port) == (host, 29500)


@pytest.mark.parametrize("port", ["abc", "0", "70000"])
def test_a_master_port_that_is_no_port_is_named(port):
    with pytest.raises(ConfigError, match=f"MASTER_PORT='{port}': expected a port number"):
        cluster.slurm_task({**STEP, "MASTER_ADDR": "head", "MASTER_PORT": port})


def test_a_batch_shell_is_no_rank_and_a_missing_variable_is_named():
    batch_shell = {k: v for k, v in STEP.items() if k != "SLURM_STEP_ID"}
    assert cluster.in_job_step(STEP) and not cluster.in_job_step(batch_shell)
    assert not cluster.in_job_step({})
    with pytest.raises(ConfigError, match="SLURM_LOCALID not set"):
        cluster.slurm_task({k: v for k, v in STEP.items() if k != "SLURM_LOCALID"})


def test_the_node_list_is_expanded_by_slurm(slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    assert cluster.first_host("gpu[07-09,11],cpu1") == "gpu07"
    assert cluster.first_host("node3") == "node3"


def test_a_task_uses_its_local_gpu_or_the_one_slurm_bound_to_it():
    assert cluster.gpu_of(2, visible=4) == 2
    assert cluster.gpu_of(2, visible=1) == 0  # --gpus-per-task=1: each task sees its own GPU
    with pytest.raises(ConfigError, match="task 2 on this node sees 2 GPUs"):
        cluster.gpu_of(2, visible=2)


@pytest.fixture
def restore_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT,
                                              signal.SIGUSR1, signal.SIGUSR2)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_the_resume_signal_exits_75_and_sigterm_as_before(restore_handlers):
    config = SimpleNamespace(stop_signal="USR1")
    assert stops.resume_signal(SimpleNamespace(stop_signal=None), config) == signal.SIGUSR1
    usr2 = stops.resume_signal(SimpleNamespace(stop_signal="USR2"), config)
    assert usr2 == signal.SIGUSR2  # the command line wins over the config
    stop = StopRequest(signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGUSR1)
    assert stop() and stop.resuming and stop.exit_status == RESUME_STATUS == 75
    stop = StopRequest(signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop() and not stop.resuming and stop.exit_status == 128 + signal.SIGTERM
    stop.resume = True  # another rank got the resume signal: every rank says "resume me"
    assert stop.exit_status == RESUME_STATUS


def test_a_resume_signal_during_start_up_is_a_stop_request_not_a_death(restore_handlers,
                                                                        monkeypatch):
    monkeypatch.setattr(stops, "_early", [])
    stops.catch_early()  # train.py does this first: imports and set-up take seconds
    os.kill(os.getpid(), signal.SIGUSR1)
    request = stops.stop_request(SimpleNamespace(stop_signal=None),
                                SimpleNamespace(stop_signal="USR1"))
    assert request() and request.exit_status == RESUME_STATUS
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL  # not the resume signal: as ever


def test_requeue_asks_slurm_only_on_rank_0_of_a_job_after_the_resume_signal(monkeypatch):
    calls = []
    monkeypatch.setattr(preempt.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or
                        SimpleNamespace(returncode=0, stderr="", stdout="JobId=77 "
                                        "JobState=RUNNING Reason=None"))
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    config, said = SimpleNamespace(requeue=True), []
    args = SimpleNamespace(requeue=False)
    assert preempt.requeue(143, args, config, 0, said.append) == 143
    assert preempt.requeue(RESUME_STATUS, args, config, 1, said.append) == RESUME_STATUS
    assert calls == []
    assert preempt.requeue(RESUME_STATUS, args, config, 0, said.append) == RESUME_STATUS
    assert calls == [["scontrol", "show", "job", "-o", "77"], ["scontrol", "requeue", "77"]]
    assert said == ["requeued SLURM job 77: it continues from this snapshot with --iter latest"]


@pytest.mark.parametrize("state", ["COMPLETING", "CANCELLED"])
def test_a_cancelled_job_is_never_requeued_even_when_term_is_the_resume_signal(monkeypatch,
                                                                               state):
    calls = []
    monkeypatch.setattr(preempt.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or
                        SimpleNamespace(returncode=0, stderr="", stdout="JobId=77 "
                                        f"JobState={state} Reason=None"))
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    said = []
    status = preempt.requeue(RESUME_STATUS, SimpleNamespace(requeue=True),
                             SimpleNamespace(requeue=True), 0, said.append)
    assert status == RESUME_STATUS
    assert calls == [["scontrol", "show", "job", "-o", "77"]]  # no `scontrol requeue`
    assert said == [(f"SLURM job 77 is {state} (cancelled by scancel, or its time is up): not "
                    "requeued; to continue, submit it again (--iter latest continues from this "
                    "snapshot)")]


def test_rolling_snapshots_never_push_periodic_ones_out(tmp_path):
    config = SimpleNamespace(snapshot_name="R", snapshot_dir=tmp_path, snapshot=100,
                             snapshot_minutes=30)
    for iteration in (100, 200, 250, 300, 310, 370):  # 250, 310, 370: by the clock
        (tmp_path / f"R_{iteration}.pkl").write_bytes(b"x")
    prune(config, keep=2)
    assert list(numbered(config)) == [200, 300, 370]
    (tmp_path / "R_400.pkl").write_bytes(b"x")
    prune(config, keep=2)
    assert list(numbered(config)) == [300, 400]


RUNNER = """
import json, os, sys
sys.path.insert(0, {repo!r})
from cornernet.commands import train
from core.engine import preempt

class FakeClock(preempt.SnapshotClock):
    '''Rank r's clock moves {{steps}}[r] seconds per iteration; records where it saved.'''
    def __init__(self, minutes, clock=None):
        self.now, self.iteration, self.saves = 0.0, 0, []
        self.rank = int(os.environ["RANK"])
        super().__init__(minutes, clock=lambda: self.now)

    def due(self):
        self.iteration += 1
        self.now += {steps}[self.rank]
        return super().due()

    def saved(self):
        self.saves.append(self.iteration)
        with open(os.path.join({out!r}, f"rank{{self.rank}}.json"), "w") as f:
            json.dump(self.saves, f)
        super().saved()

if __name__ == "__main__":  # not in the prefetch workers, which import this file again
    preempt.SnapshotClock = FakeClock
    sys.exit(train.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_snapshots_by_the_clock_come_on_every_rank_together(tmp_path, coco128):
    """Two torchrun ranks whose clocks disagree: rank 0's stands still, rank 1's moves 25 s
    per iteration. snapshot_minutes=1, snapshot=4, max_iter=10: rank 1's clock passes 60 s at
    iteration 3 (75 s), is reset by the periodic snapshot at 4 and by its own at 3 and 7, so
    both ranks snapshot at 3, 4, 7, 8 and 10 and the files are those."""
    config_dir = write_config(tmp_path, coco128, db={"input_size": [64, 64],
                                                     "output_sizes": [[16, 16]]},
                              max_iter=10, snapshot=4, snapshot_minutes=1, val_iter=0,
                              display=5)
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER.format(repo=str(REPO), steps="[0.0, 25.0]", out=str(tmp_path)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(runner), "Tiny128", "--config-dir", str(config_dir), "--workers", "1",
           "--distributed"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=280, cwd=REPO,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    saves = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert saves == [[3, 4, 7, 8, 10]] * 2
    snapshot_dir = tmp_path / "cache" / "nnet" / "Tiny128"
    assert sorted(int(p.stem.split("_")[1]) for p in snapshot_dir.glob("Tiny128_*.pkl")) == \
        [3, 4, 7, 8, 10]


def test_submit_gives_train_py_what_follows_the_double_dash(monkeypatch):
    pytest.importorskip("submitit")
    from cornernet.commands import submit

    args = submit.parse_args(["CornerNet", "--gpus-per-node", "2", "--hours", "2", "--",
                              "--workers", "6"])
    assert (args.cfg, args.gpus_per_node, args.hours) == ("CornerNet", 2, 2.0)
    assert submit.Training(args.cfg, args.train_args).argv() == [
        "CornerNet", "--distributed", "--iter", "latest", "--stop-signal", "USR2",
        "--workers", "6"]

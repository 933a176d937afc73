"""torchrun --max-restarts: a rank killed with SIGKILL costs a restart, not the run."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from _resume import (
    NAME,
    SGD,
    SMALL,
    assert_equal_params,
    assert_one_record,
    snapshot,
    spawned_reference,
)
from _train_helpers import Training, children, write_config
from torch import distributed as dist

from core.utils.dist import free_port, torchrun_store


def rank_of(pid: int) -> int | None:
    """The RANK torchrun gave the process `pid`, if any."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"RANK="):
            return int(entry[5:])
    return None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_killed_rank_is_restarted_and_the_run_ends_as_an_uninterrupted_one(tmp_path, coco128,
                                                                            capfd):
    root = tmp_path / "elastic"
    config_dir = write_config(root, coco128, db=SMALL, **SGD, max_iter=10, snapshot=3)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "--max-restarts=1", str(Path(__file__).resolve().parents[2] / "train.py"), NAME,
           "--config-dir", str(config_dir), "--workers", "1", "--distributed", "--iter",
           "latest", "--device", "cpu"]  # gloo ranks on the CPU, on a GPU machine too
    run = Training(config_dir, cmd=cmd)
    try:
        run.wait_for(r"iteration 5: loss", timeout=300)
        victims = [pid for pid in children(run.proc.pid) if rank_of(pid) == 1
                   and "train.py" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")]
        assert victims, "rank 1 not found"
        os.kill(min(victims), signal.SIGKILL)  # the rank itself, not its prefetch workers
        status, _, output = run.finish(timeout=400)
    finally:
        run.kill()
    assert status == 0, output[-4000:]
    resumed = [line for line in output.splitlines() if "continuing from snapshot" in line]
    assert resumed and resumed[-1].split()[-1] in {"3", "6"}, output[-4000:]
    reference = spawned_reference(tmp_path / "spawn", coco128, capfd, max_iter=10,
                                  snapshot=3)
    assert_equal_params(snapshot(root, 10)["model"], snapshot(reference, 10)["model"])
    assert_one_record(root, 10)


def test_each_torchrun_attempt_joins_with_keys_of_its_own(monkeypatch):
    """torchrun keeps one store across restarts: an attempt must not read the keys (gloo's
    addresses) the attempt before it left there."""
    port = free_port()
    agent = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
                        "TORCHELASTIC_USE_AGENT_STORE": "True"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    first = torchrun_store(rank=0)
    first.set("0/rank_0", "127.0.0.1:40838")  # what the killed attempt's rank 0 listened on
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    second = torchrun_store(rank=1)
    assert not second.check(["0/rank_0"])
    second.set("0/rank_0", "127.0.0.1:40999")
    assert first.get("0/rank_0") == b"127.0.0.1:40838"
    assert agent.check(["cornernet/attempt/1/0/rank_0"])

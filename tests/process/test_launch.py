"""core.engine.launch: train's options (core/engine/options.py) as the frozen value every rank
is given, and what launch settles as new ones."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pickle
import threading
from types import SimpleNamespace

import pytest
from _train_helpers import write_config

from core.config import ConfigError
from core.engine import cluster
from core.engine import launch as launcher
from core.engine.launch import _rendezvous, launch
from core.engine.options import TrainOptions
from cornernet.commands import train


def test_the_command_line_is_read_into_the_options_value():
    options = train.parse_args(["Tiny128", "--iter", "latest", "--workers", "2", "--distributed",
                                "--world-size", "1", "--set", "system.max_iter=3", "db.top_k=5"])
    assert options == TrainOptions(cfg_file="Tiny128", start_iter="latest", workers=2,
                                   distributed=True, world_size=1,
                                   overrides=(("system.max_iter", 3), ("db.top_k", 5)))


def test_options_are_frozen_and_pickle_whole():
    options = train.parse_args(["Tiny128", "--workers", "3", "--device", "cpu"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.workers = 5  # type: ignore[misc]
    copy = pickle.loads(pickle.dumps(options))
    assert copy == options and copy.workers == 3 and copy.device == "cpu"


def test_the_rendezvous_is_a_new_options_and_the_old_one_is_untouched():
    asked = TrainOptions(cfg_file="Tiny128", distributed=True, world_size=1)
    settled = _rendezvous(asked)
    assert asked.dist_url is None
    assert settled.dist_url.startswith("tcp://127.0.0.1:")
    assert dataclasses.replace(settled, dist_url=None) == asked
    given = TrainOptions(cfg_file="Tiny128", distributed=True, world_size=2,
                         dist_url="tcp://node0:29500")
    assert _rendezvous(given) is given
    for wrong, message in ((TrainOptions(cfg_file="T", distributed=True), "needs --world-size"),
                           (TrainOptions(cfg_file="T", distributed=True, world_size=2, rank=2),
                            "--rank 2 is outside --world-size 2"),
                           (TrainOptions(cfg_file="T", distributed=True, world_size=2),
                            "--dist-url")):
        with pytest.raises(ConfigError, match=message):
            _rendezvous(wrong)


def test_slurm_placement_is_adopted_as_new_options():
    asked = TrainOptions(cfg_file="Tiny128")
    task = cluster.SlurmTask(rank=3, world=4, local=1, nodes=2, url="tcp://n1:2345",
                             job_id="77")
    adopted = cluster.adopt(asked, task)
    assert (adopted.distributed, adopted.world_size, adopted.rank, adopted.dist_url) == (
        True, 4, 3, "tcp://n1:2345")
    assert asked == TrainOptions(cfg_file="Tiny128")


def test_launch_hands_train_frozen_options_with_the_device_resolved(tmp_path, coco128,
                                                                     restore_handlers):
    folder = write_config(tmp_path, coco128, val_iter=0)
    seen = []

    def fake_train(args, system_config, db_config, rank, world, device, distributed, watch):
        seen.append((args, system_config.max_iter, rank, world, str(device), distributed))
        return 0

    argv = ["Tiny128", "--config-dir", str(folder), "--device", "cpu", "--workers", "1",
            "--set", "system.max_iter=3"]
    assert launch(train.parse_args(argv), fake_train) == 0
    (args, max_iter, rank, world, device, distributed), = seen
    assert isinstance(args, TrainOptions) and args.device == "cpu" and args.workers == 1
    assert (max_iter, rank, world, device, distributed) == (3, 0, 1, "cpu", False)


def test_the_launcher_sleeps_while_its_last_rank_finishes(monkeypatch):
    """Rank 1 has ended, rank 0 still writes its report: the launcher waits for rank 0's end
    in a few passes, not in a loop on the ended rank's ready sentinel."""
    ended_r, ended_w = os.pipe()
    os.write(ended_w, b"x")  # a process's sentinel is ready once it has ended
    last_r, last_w = os.pipe()
    ranks = [SimpleNamespace(pid=10, exitcode=None, sentinel=last_r),
             SimpleNamespace(pid=11, exitcode=0, sentinel=ended_r)]
    waits = []
    wait = multiprocessing.connection.wait

    def waited(objects, *args, **kwargs):
        waits.append(list(objects))
        return wait(objects, *args, **kwargs)

    monkeypatch.setattr(multiprocessing.connection, "wait", waited)

    def finish():
        ranks[0].exitcode = 0
        os.write(last_w, b"x")

    timer = threading.Timer(0.5, finish)
    timer.start()
    reports = multiprocessing.get_context("spawn").SimpleQueue()
    try:
        status = launcher._supervise(ranks, reports, 0)
    finally:
        timer.cancel()
        reports.close()
        for fd in (ended_r, ended_w, last_r, last_w):
            os.close(fd)
    # What the loop waits on, not how often (a count would depend on the machine's load): its
    # waits are those on more than the reports (polling the reports waits on them alone).
    passes = [objects for objects in waits if len(objects) > 1]
    assert status == 0 and passes
    assert all(ended_r not in objects and last_r in objects for objects in passes)

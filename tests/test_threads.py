"""The thread count and wait policy of the commands (core/utils/threads.py): from the CPUs the
process may use, --threads or OMP_NUM_THREADS; passive waiting unless the user chose; training's
threads and prefetch workers together within the CPUs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from _tiny_coco import ROOT, script_env
from test_names_travel import trained  # noqa: F401 - the fixture

from core.errors import UsageError
from core.utils.threads import (
    before_torch,
    choose_threads,
    threads_line,
    trainer_threads,
    usable_cpus,
)
from cornernet import Detector


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_usable_cpus_follow_the_affinity_not_the_machine():
    mask = os.sched_getaffinity(0)
    assert usable_cpus() == len(mask)
    if len(mask) < 2:
        pytest.skip("one CPU: no smaller affinity to try")
    try:
        os.sched_setaffinity(0, {min(mask)})
        assert usable_cpus() == 1
        assert choose_threads(environ={}) == 1
    finally:
        os.sched_setaffinity(0, mask)


def test_threads_asked_first_then_omp_num_threads_then_the_cpus():
    assert choose_threads(3, environ={"OMP_NUM_THREADS": "5"}, cpus=8) == 3
    assert choose_threads(None, environ={"OMP_NUM_THREADS": "5"}, cpus=8) == 5
    assert choose_threads(None, environ={}, cpus=8) == 8
    for unusable in ("0", "two", "", "-1"):
        assert choose_threads(None, environ={"OMP_NUM_THREADS": unusable}, cpus=6) == 6


def test_zero_threads_is_a_usage_error():
    with pytest.raises(UsageError, match="--threads must be at least 1, got 0"):
        choose_threads(0)


def test_passive_waiting_unless_the_user_chose():
    environ: dict[str, str] = {}
    before_torch(environ)
    assert environ == {"OMP_WAIT_POLICY": "PASSIVE"}
    chosen = {"OMP_WAIT_POLICY": "ACTIVE"}
    before_torch(chosen)
    assert chosen == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_training_threads_and_workers_share_the_cpus():
    assert trainer_threads(workers=2, ranks=1, cpus=8, environ={}) == 6
    assert trainer_threads(workers=2, ranks=2, cpus=8, environ={}) == 2  # 2 x (2 + 2) = 8
    assert trainer_threads(workers=0, ranks=1, cpus=4, environ={}) == 4
    assert trainer_threads(workers=4, ranks=1, cpus=2, environ={}) == 1  # never fewer than one


def test_training_threads_the_user_set_are_kept():
    assert trainer_threads(workers=2, ranks=1, cpus=8, environ={"OMP_NUM_THREADS": "3"}) == 3


def test_the_detector_takes_its_threads(trained, keep_threads):  # noqa: F811
    snapshot = trained / "cache" / "nnet" / "Names" / "Names_0.pkl"
    torch.set_num_threads(2)
    detector = Detector.from_snapshot(snapshot, device="cpu", threads=1)
    assert detector.threads == 1 and torch.get_num_threads() == 1


def test_the_threads_line_names_count_cpus_and_policy(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert threads_line(3) == f"threads: 3 of {usable_cpus()} usable CPUs, waiting passive"


@pytest.mark.slow  # test.py as a process of its own: its OpenMP starts with its settings
def test_test_py_waits_passively_on_the_threads_asked(trained):  # noqa: F811
    env = {k: v for k, v in script_env().items() if k not in ("OMP_WAIT_POLICY",
                                                             "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, str(ROOT / "test.py"), "Names", "--config-dir",
                           str(trained / "configs"), "--testiter", "0", "--device", "cpu",
                           "--threads", "1", "--backend", "none"],
                          capture_output=True, text=True, timeout=300, cwd=trained, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert f"threads: 1 of {usable_cpus()} usable CPUs, waiting passive" in done.stdout

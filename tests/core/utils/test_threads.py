"""The thread count and wait policy of the commands (core/utils/threads.py): from the CPUs the
process may use, --threads or OMP_NUM_THREADS; passive waiting unless the user chose; training's
threads and prefetch workers together within the CPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch
from _tiny_coco import ROOT, script_env

from core.errors import UsageError
from core.utils.threads import (
    CpuSample,
    CpuShare,
    ThreadGovernor,
    before_torch,
    choose_threads,
    governor,
    others_busy,
    sample_cpu,
    threads_line,
    training_share,
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


def test_training_workers_and_threads_never_ask_for_more_than_the_cpus():
    assert training_share(workers=2, ranks=1, cpus=8, environ={}) == CpuShare(2, 6)
    assert training_share(workers=2, ranks=2, cpus=8, environ={}) == CpuShare(2, 2)  # 2x(2+2)
    assert training_share(workers=1, ranks=1, cpus=4, environ={}) == CpuShare(1, 3)
    capped = training_share(workers=2, ranks=1, cpus=2, environ={})
    assert (capped.workers, capped.threads) == (1, 1)
    assert capped.note == ("--workers 2 would ask for 3 CPUs with the trainer, on 2 usable CPUs: "
                           "1 prefetch worker(s) (the batches are the same with any number)")
    shared = training_share(workers=4, ranks=4, cpus=16, environ={})
    assert (shared.workers, shared.threads) == (3, 1)
    assert "4 of this machine's 16 usable CPUs for each of 4 processes" in shared.note
    # one CPU: a worker and the trainer share it (no fewer than one of each)
    alone = training_share(workers=3, ranks=1, cpus=1, environ={})
    assert (alone.workers, alone.threads) == (1, 1) and "3 would ask for 4" in alone.note


def test_training_threads_the_user_set_are_kept():
    share = training_share(workers=2, ranks=1, cpus=8, environ={"OMP_NUM_THREADS": "3"})
    assert (share.workers, share.threads, share.note) == (2, 3, None)


def test_the_detector_takes_its_threads(named_run, keep_threads):
    snapshot = named_run / "cache" / "nnet" / "Names" / "Names_0.pkl"
    torch.set_num_threads(2)
    detector = Detector.from_snapshot(snapshot, device="cpu", threads=1)
    assert detector.threads == 1 and torch.get_num_threads() == 1


def test_the_threads_line_names_count_cpus_and_policy(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert threads_line(3) == f"threads: 3 of {usable_cpus()} usable CPUs, waiting passive"


@pytest.mark.slow  # test.py as a process of its own: its OpenMP starts with its settings
def test_test_py_waits_passively_on_the_threads_asked(named_run):
    env = {k: v for k, v in script_env().items() if k not in ("OMP_WAIT_POLICY",
                                                             "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, str(ROOT / "test.py"), "Names", "--config-dir",
                           str(named_run / "configs"), "--testiter", "0", "--device", "cpu",
                           "--threads", "1", "--backend", "none"],
                          capture_output=True, text=True, timeout=300, cwd=named_run, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert f"threads: 1 of {usable_cpus()} usable CPUs, waiting passive" in done.stdout


def test_others_busy_is_the_busy_time_less_this_process_s():
    before = CpuSample(busy=1000, total=4000, own=300)
    # 2 CPUs for 100 ticks each: 150 ticks busy, 50 of them this process's
    after = CpuSample(busy=1150, total=4200, own=350)
    assert others_busy(before, after, 2) == pytest.approx(1.0)
    assert others_busy(before, CpuSample(1150, 4200, 450), 2) == 0.0  # never below 0
    assert others_busy(before, CpuSample(1400, 4200, 300), 2) == 2.0  # never above the CPUs
    assert others_busy(before, before, 2) == 0.0  # no time passed


class _Counters:
    """CPU counters a test writes: others keep `others` CPUs busy, this process `own`."""

    def __init__(self, cpus: int) -> None:
        self.cpus, self.now, self.sample = cpus, 0.0, CpuSample(0, 0, 0)

    def advance(self, seconds: float, others: float, own: float) -> None:
        ticks = int(100 * seconds)
        self.now += seconds
        self.sample = CpuSample(self.sample.busy + int((others + own) * ticks),
                                self.sample.total + self.cpus * ticks,
                                self.sample.own + int(own * ticks))


def test_the_governor_computes_on_the_cpus_others_leave_free():
    counters, asked = _Counters(4), []
    governor = ThreadGovernor(4, interval=0.95, first=0.25, sample=lambda: counters.sample,
                              clock=lambda: counters.now, set_threads=asked.append)
    assert governor.tick() == 4 and asked == []
    counters.advance(0.2, others=3.0, own=1.0)
    assert governor.tick() == 4 and asked == []  # the first count after 0.25 s
    counters.advance(0.1, others=3.0, own=1.0)
    assert governor.tick() == 1 and asked == [1]  # 3 of 4 busy: one left
    counters.advance(0.5, others=1.6, own=1.0)
    assert governor.tick() == 1 and asked == [1]  # then every interval (0.95 s)
    counters.advance(0.5, others=1.6, own=1.0)
    assert governor.tick() == 2 and asked == [1, 2]  # 2.4 free rounds to 2
    counters.advance(1.0, others=0.2, own=2.0)
    assert governor.tick() == 4 and asked == [1, 2, 4]
    counters.advance(1.0, others=4.0, own=0.0)
    assert governor.tick() == 1  # never fewer than one
    summary = governor.summary()
    assert summary.startswith("threads: 4 at the start, then 1 at batch 3 (others busy on 3.0 "
                              "CPUs), 2 at batch 5 (others busy on 1.6 CPUs)"), summary


def test_the_governor_keeps_a_count_that_is_not_its_own(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert not governor(asked=3, threads=3).adjust
    assert governor(asked=3, threads=3).summary() == ""
    assert not governor(None, 5, environ={"OMP_NUM_THREADS": "5"}).adjust
    kept = ThreadGovernor(2, sample=lambda: pytest.fail("sampled"), adjust=False)
    assert kept.tick() == 2 and kept.threads == 2
    if usable_cpus() >= 2 and sample_cpu() is not None:
        assert governor(None, 2, environ={}).adjust


def test_sample_cpu_reads_the_usable_cpus_and_this_process(tmp_path):
    (tmp_path / "self").mkdir()
    (tmp_path / "stat").write_text(
        "cpu  90 0 30 300 10 0 0 0 0 0\n"
        "cpu0 10 1 5 100 4 1 1 2 0 0\n"
        "cpu1 80 0 25 200 6 0 0 0 0 0\n"
        "cpu7 5 0 0 10 0 0 0 0 0 0\n"
        "intr 12345\n")
    (tmp_path / "self" / "stat").write_text(
        "42 (a (strange) name) S 1 42 42 0 -1 4194304 0 0 0 0 17 4 0 0 20 0 1 0\n")
    assert sample_cpu({0, 1}, tmp_path) == CpuSample(busy=(20 + 105), total=124 + 311, own=21)
    assert sample_cpu({0}, tmp_path) == CpuSample(busy=20, total=124, own=21)
    assert sample_cpu(None, tmp_path / "missing") is None


@pytest.mark.skipif(sample_cpu() is None or usable_cpus() < 2,
                    reason="needs Linux's /proc counters and 2 usable CPUs")
def test_the_governor_sees_busy_processes_of_this_machine():
    spin = "import time\nwhile True:\n    time.time()\n"
    mask = sorted(os.sched_getaffinity(0))[:2]
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        for spinner, cpu in zip(spinners, mask):
            os.sched_setaffinity(spinner.pid, {cpu})
        time.sleep(0.3)
        before = sample_cpu(set(mask))
        time.sleep(1.0)
        # This process sleeps: the two CPUs are the spinners' (and whatever else runs here).
        assert others_busy(before, sample_cpu(set(mask)), 2) > 1.5
        asked: list[int] = []
        governor = ThreadGovernor(2, interval=0.5, sample=lambda: sample_cpu(set(mask)),
                                  set_threads=asked.append)
        time.sleep(0.6)
        assert governor.tick() == 1 and asked == [1]
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_a_thread_count_above_the_usable_cpus_is_capped_with_a_note():
    from core.utils.threads import threads_note  # issue 46: threads beyond the CPUs only wait

    assert choose_threads(999, environ={}, cpus=2) == 2
    assert threads_note(999, environ={}, cpus=2) == ("--threads 999 is more than the 2 usable "
                                                     "CPUs: 2 threads")
    assert choose_threads(None, environ={"OMP_NUM_THREADS": "999"}, cpus=2) == 2
    assert threads_note(None, environ={"OMP_NUM_THREADS": "999"}, cpus=2) == (
        "OMP_NUM_THREADS=999 is more than the 2 usable CPUs: 2 threads")
    assert threads_note(2, environ={"OMP_NUM_THREADS": "999"}, cpus=2) is None
    share = training_share(workers=1, ranks=1, cpus=2, environ={"OMP_NUM_THREADS": "999"})
    assert (share.workers, share.threads) == (1, 2)
    assert share.note == "OMP_NUM_THREADS=999 is more than the 2 usable CPUs: 2 trainer threads"


def test_threads_that_are_no_whole_number_are_one_line_before_torch():
    for value, kind in ((True, "bool"), (2.5, "float"), ("4", "str")):
        with pytest.raises(UsageError) as caught:
            choose_threads(value)
        assert str(caught.value) == (f"threads (--threads) {value!r}: expected a whole number "
                                     f"of at least 1, got {kind}")


def test_one_thread_tells_openmp_and_sets_torch_where_it_is_imported(monkeypatch):
    """What a prefetch worker runs first: torch is already imported here, so its count goes
    to 1 too (and through set_torch_threads, which remembers torch's own)."""
    from core.utils import threads

    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.setattr(threads, "_torch_own", [])  # this test's own record of torch's count
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        threads.one_thread()
        assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
        assert threads.torch_own_threads() == 2
    finally:
        torch.set_num_threads(before)

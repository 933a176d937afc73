"""core.data.prefetch: ordered, reproducible batches from worker processes; errors and shutdown."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _fake_data import FakeDB, fake_sample

import core.data.prefetch
from core.config import SystemConfig
from core.data.chunks import deal
from core.data.prefetch import Prefetcher, WorkerError
from core.data.stream import stream_indices
from core.utils.procs import is_alive, process_identity


def config(batch_size=3, **extra):
    return SystemConfig().update_config({"batch_size": batch_size, "prefetch_size": 4,
                                         "seed": 7, **extra})


def collect(workers, count, start=0, rank=0, world=1, make_db=FakeDB, batch_size=3,
            **extra):
    system = config(batch_size * world, **extra)
    share = deal(system.batch_size, system.chunk_sizes, rank, world)
    probe, _ = fake_sample(make_db(), 0, share.local_batch)
    with Prefetcher(make_db, fake_sample, probe, share=share, workers=workers, data_aug=True,
                    stream="train", start=start, seed=7, prefetch_size=4) as data:
        return [data.get()[0] for _ in range(count)]


def images(batch):
    return batch["image"][:, 0, 0, 0].tolist()


def test_batches_do_not_depend_on_the_worker_count():
    one, three = collect(1, 7), collect(3, 7)
    for a, b in zip(one, three):
        assert images(a) == images(b)
        assert np.array_equal(a["noise"].numpy(), b["noise"].numpy())


def test_an_epoch_is_a_permutation_and_epochs_differ():
    batches = collect(2, 10, batch_size=3)  # 30 positions over a 10-image dataset
    flat = [i for b in batches for i in images(b)]
    epochs = [flat[i:i + 10] for i in range(0, 30, 10)]
    for epoch in epochs:
        assert sorted(epoch) == list(range(10))
    assert epochs[0] != epochs[1]


def test_starting_at_batch_n_reproduces_batch_n():
    straight = collect(2, 6)
    for start in (3, 4):
        resumed = collect(2, 2, start=start)
        assert images(resumed[0]) == images(straight[start])
        assert np.array_equal(resumed[1]["noise"].numpy(), straight[start + 1]["noise"].numpy())


def test_ranks_read_disjoint_images_within_an_epoch():
    # 12 images, global batch 4 dealt to 2 ranks: 3 batches make one epoch.
    make_db = functools.partial(FakeDB, length=12)
    seen = [images(b) for rank in (0, 1) for b in collect(1, 3, rank=rank, world=2,
                                                          batch_size=2, make_db=make_db)]
    flat = [i for batch in seen for i in batch]
    assert sorted(flat) == list(range(12))


def test_a_chunk_is_the_same_whichever_process_runs_it():
    """Chunks [1, 2, 2, 1]: one process, or 2 processes (chunks 0-1 and 2-3), or 3 processes
    (chunks 0-1, 2, 3) build the same images with the same random draws."""
    extra = {"chunk_sizes": [1, 2, 2, 1]}
    one = collect(2, 4, batch_size=6, **extra)
    for world in (2, 3):
        parts = [collect(1, 4, rank=rank, world=world, batch_size=6 // world, **extra)
                 for rank in range(world)]
        for n in range(4):
            joined = np.concatenate([part[n]["noise"].numpy() for part in parts])
            assert np.array_equal(joined, one[n]["noise"].numpy())
            assert [i for part in parts for i in images(part[n])] == images(one[n])


def test_stream_positions_map_to_epoch_permutations():
    cache = {}
    first = stream_indices(7, 0, 10, 10, True, cache)
    assert sorted(first.tolist()) == list(range(10))
    assert stream_indices(7, 3, 4, 10, True, cache).tolist() == first[3:7].tolist()
    across = stream_indices(7, 8, 4, 10, True, cache)
    assert across[:2].tolist() == first[8:].tolist()
    assert across[2:].tolist() == stream_indices(7, 10, 2, 10, True, {}).tolist()
    assert stream_indices(7, 5, 3, 10, False, {}).tolist() == [5, 6, 7]


def test_different_ranks_draw_different_augmentation():
    a = collect(1, 1, rank=0, world=2)[0]["noise"].numpy()
    b = collect(1, 1, rank=1, world=2)[0]["noise"].numpy()
    assert not np.array_equal(a, b)


def test_worker_exception_arrives_with_traceback_and_image_path():
    make_db = functools.partial(FakeDB, fail_at=4)
    probe, _ = fake_sample(FakeDB(), 0, 3)
    with Prefetcher(make_db, fake_sample, probe, share=deal(3, None, 0, 1), workers=2,
                    seed=7, prefetch_size=4, data_aug=True, stream="train"
                    ) as data, pytest.raises(WorkerError) as err:
        for _ in range(10):
            data.get()
    text = str(err.value)
    assert "Traceback" in text and "cannot decode fake/004.jpg" in text
    assert "(image fake/004.jpg)" in text


def test_killed_worker_raises_instead_of_hanging():
    make_db = functools.partial(FakeDB, delay=0.05)
    probe, _ = fake_sample(FakeDB(), 0, 3)
    data = Prefetcher(make_db, fake_sample, probe, share=deal(3, None, 0, 1), workers=2,
                      seed=7, prefetch_size=4, data_aug=True, stream="train")
    try:
        data.get()
        os.kill(data.procs[1].pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match="SIGKILL"):
            for _ in range(100):
                data.get()
        assert time.monotonic() - t0 < 10
    finally:
        data.close()
    assert not any(proc.is_alive() for proc in data.procs)


def test_close_stops_every_worker():
    probe, _ = fake_sample(FakeDB(), 0, 3)
    data = Prefetcher(FakeDB, fake_sample, probe, share=deal(3, None, 0, 1), workers=3,
                      seed=7, prefetch_size=4, data_aug=True, stream="train")
    data.get()
    data.close()
    assert [proc.exitcode is not None for proc in data.procs] == [True] * 3


def test_unreadable_image_in_a_one_image_batch_is_replaced_from_the_stream(tmp_path, coco128):
    import shutil

    from core.config import check_db_config
    from core.dbs import datasets
    from core.sample import sampler

    images = tmp_path / "images"
    shutil.copytree(coco128 / "images", images)
    broken = images / "000000000030.jpg"
    broken.write_bytes(broken.read_bytes()[:2000])
    db_config = check_db_config({
        "input_size": [128, 128], "output_sizes": [[32, 32]], "max_objects": 32,
        "image_dirs": {"train": str(images)},
        "annotation_files": {"train": str(coco128 / "annotations" /
                                          "instances_coco128_train.json")}})
    system = config(1, cache_dir=str(tmp_path / "cache"))
    make_db = functools.partial(datasets["COCO"], db_config, split="train", sys_config=system)
    sample = sampler("cornernet")
    probe_db = make_db()
    probe, _ = sample(probe_db, 0, 1)
    skipped = []
    with Prefetcher(make_db, sample, probe, share=deal(1, None, 0, 1), workers=1,
                    data_aug=True, stream="train", seed=7, prefetch_size=4) as data:
        for _ in range(len(probe_db)):  # one epoch of the training images
            batch, meta = data.get()
            skipped += meta["skipped"]
            assert batch["image"].shape == (1, 128, 128, 3)
    assert skipped == [str(broken)]


# Run in a fresh process: a process has one fork server, started by its first Prefetcher with
# the modules of that one's dataset (a test module or bench script that imports torch would
# have put torch in this process's).
FRESH_PREFETCHER = """
import sys
from pathlib import Path

def main(coco128, cache):  # its imports here, as train.py's: the fork server preloads the top's
    import functools
    from core.config import SystemConfig, check_db_config
    from core.data.chunks import deal
    from core.data.prefetch import Prefetcher
    from core.dbs import datasets
    from core.sample import sampler
    db_config = check_db_config({
        "input_size": [128, 128], "output_sizes": [[32, 32]], "max_objects": 32,
        "image_dirs": {"train": str(coco128 / "images")},
        "annotation_files": {"train": str(coco128 / "annotations" /
                                          "instances_coco128_train.json")}})
    system = SystemConfig().update_config({"batch_size": 2, "cache_dir": cache})
    make_db = functools.partial(datasets["COCO"], db_config, split="train", sys_config=system)
    sample = sampler("cornernet")
    with Prefetcher(make_db, sample, sample(make_db(), 0, 2)[0], share=deal(2, None, 0, 1),
                    workers=1, data_aug=True, stream="train", seed=7, prefetch_size=4) as data:
        batch, _ = data.get()
        worker = data.procs[0].pid
        server = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
        for pid in (worker, server):
            maps = Path(f"/proc/{pid}/maps").read_text()
            command = Path(f"/proc/{pid}/cmdline").read_text().replace(chr(0), " ")
            print(pid, command, "torch" if "libtorch" in maps else "no torch")
    print("trainer", "torch" if "libtorch" in Path("/proc/self/maps").read_text() else "no torch")
    print("image", batch["image"].dtype, tuple(batch["image"].shape), int(batch["image"].max()))

main(Path(sys.argv[1]), sys.argv[2])
"""


@pytest.mark.slow  # a fresh process that imports torch
@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads /proc (Linux)")
def test_the_workers_and_their_fork_server_leave_torch_out(tmp_path, coco128):
    """The fork server imports the data code and not torch (0.35 s of CPU against 2.0 s, once per
    training process), and so do the workers forked from it: the real dataset and sampler fill
    the shared ring, which the trainer reads as tensors holding what the sampler drew."""
    from _train_helpers import REPO

    done = subprocess.run([sys.executable, "-c", FRESH_PREFETCHER, str(coco128),
                           str(tmp_path / "cache")], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    worker, server, trainer, image = done.stdout.splitlines()
    assert worker.endswith("no torch") and server.endswith("no torch"), done.stdout
    assert "multiprocessing.forkserver" in server
    assert trainer == "trainer torch"  # what the check looks for is there where torch is
    # the batch the worker built reaches the trainer as a tensor (a uint8 image, not zeros)
    assert image.startswith("image torch.uint8 (2, 128, 128, 3) "), image
    assert int(image.split()[-1]) > 0, image


def test_the_fork_server_imports_the_modules_of_the_dataset_the_sampler_and_the_script():
    """A dataset, or a script, whose module imports torch makes the fork server import it once,
    not every worker: the modules that define the worker's code (less __main__ and builtins),
    and the installed packages the script holds at its top level (each worker runs it again),
    not the script's own modules (one that reads sys.argv when imported would see the fork
    server's)."""
    import json

    import torch

    import core.engine.stop
    from core.data import prefetch
    from core.dbs import datasets
    from core.sample import sampler

    make_db = functools.partial(datasets["COCO"], {}, split="train")
    assert prefetch.defining_modules(make_db, sampler("cornernet"), FakeDB, fake_sample) == [
        "core.dbs.coco", "core.sample.cornernet", "_fake_data"]

    def here():
        pass

    here.__module__ = "__main__"
    assert prefetch.defining_modules(here, len) == []
    script = {"np": np, "torch_nn": torch.nn, "json": json, "sys": sys, "stop": core.engine.stop,
              "here": here, "Path": Path, "deal": deal, "fake": FakeDB, "number": 3}
    assert prefetch.script_modules(*script.values()) == [
        "numpy", "torch", "json", "core.engine.stop", "pathlib", "core.data.chunks"]


# A trainer's end as the tests below stage it: killed (by the test) while it waits for its next
# batch, or killed (by itself) inside close() the moment its main thread holds a lock of
# multiprocessing's, as a rank is when its launcher kills it while it tears down after a peer's
# death. If close() takes no such lock, the trainer is killed right after it.
TRAINER_ENDS = {
    "waiting": "time.sleep(600)\n",
    "closing": (
        "def die_holding_a_lock(frame, event, arg):\n"
        "    taken = event == 'c_return' and arg.__name__ in ('acquire', '__enter__')\n"
        "    if taken and type(getattr(arg, '__self__', None)).__name__ == 'SemLock':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "sys.setprofile(die_holding_a_lock)\n"
        "data.close()\n"
        "sys.setprofile(None)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"),
}


@pytest.mark.slow  # 5 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
@pytest.mark.parametrize("end", TRAINER_ENDS)
def test_the_workers_exit_soon_after_their_trainer_dies(end):
    """The worker's parent is the fork server, which outlives a killed trainer: the worker
    must watch the trainer itself, and nothing it waits on may be a lock the trainer held when
    it died (an Event's did: its workers, their fork server and the launcher's resource tracker
    then lived for good)."""
    from _train_helpers import REPO, alive, children

    script = (
        "import os, signal, sys, time; sys.path.insert(0, 'tests')\n"
        "from _fake_data import FakeDB, fake_sample\n"
        "from core.data.chunks import deal\n"
        "from core.data.prefetch import Prefetcher\n"
        "probe, _ = fake_sample(FakeDB(), 0, 2)\n"
        "data = Prefetcher(FakeDB, fake_sample, probe, share=deal(2, None, 0, 1), workers=2,\n"
        "                  data_aug=True, stream='train', seed=0, prefetch_size=4)\n"
        "data.get()\n"
        "print('ready', flush=True)\n" + TRAINER_ENDS[end])
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        family = children(proc.pid)
        assert len(family) >= 3  # fork server and two workers at least
        if end == "waiting":
            proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while alive(family) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = alive(family)
    for pid in left:  # never leave them to the rest of the suite
        os.kill(pid, signal.SIGKILL)
    assert not left, f"left behind: {sorted(left)}"


def test_process_identity_tells_a_live_process_from_a_gone_one():
    me = process_identity(os.getpid())
    assert is_alive(me)
    assert not is_alive((me[0], "1"))  # same pid, another start time: a reused pid
    assert not is_alive(process_identity(2 ** 22 + 1))


def test_a_failing_pin_thread_ends_get_at_once_with_its_own_error(monkeypatch):
    def broken_copy(ring, slot, pin):
        raise RuntimeError("injected pin failure")

    monkeypatch.setattr(core.data.prefetch, "_copy_out", broken_copy)
    probe, _ = fake_sample(FakeDB(), 0, 3)
    t0 = time.monotonic()
    with Prefetcher(FakeDB, fake_sample, probe, share=deal(3, None, 0, 1), workers=2,
                    seed=7, prefetch_size=4, data_aug=True, stream="train"
                    ) as data, pytest.raises(WorkerError) as err:
        data.get()
    assert time.monotonic() - t0 < 10  # not the STALL_S (600 s) of a silent thread
    text = str(err.value)
    assert "pin thread pin-train-0 of the trainer failed" in text
    assert "RuntimeError: injected pin failure" in text and "Traceback" in text

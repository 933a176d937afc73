"""core.utils.files: atomic writes on a full disk, stale temp files, start-up checks."""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from _fake_data import FakeDB, fake_sample

from core.config import SystemConfig, check_db_config
from core.data.chunks import deal
from core.data.prefetch import Prefetcher
from core.data.ring import image_bytes, ring_slots, shm_need
from core.sample import sampling_functions
from core.utils import files
from core.utils.files import (
    DiskFull,
    NotWritable,
    ShmTooSmall,
    check_free_disk,
    check_shm,
    probe_writable,
    remove_stale_temp_files,
    snapshot_bytes,
    temp_path,
    write_atomic,
)
from core.utils.procs import process_identity

REPO = Path(__file__).resolve().parents[3]
MiB = 2 ** 20


def load(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def fail_writes_after(monkeypatch, allowed: int, code: int = errno.ENOSPC) -> None:
    """os.write succeeds for `allowed` bytes in all, then raises OSError(code)."""
    real_write, written = os.write, [0]

    def write(fd, data):
        if written[0] + len(data) > allowed:
            raise OSError(code, os.strerror(code))
        written[0] += len(data)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_write_atomic_round_trips_and_leaves_only_the_target(tmp_path):
    path = tmp_path / "nnet" / "snap_2.pkl"
    write_atomic({"w": torch.arange(5.0), "iteration": 2}, path)
    state = load(path)
    assert torch.equal(state["w"], torch.arange(5.0)) and state["iteration"] == 2
    assert [p.name for p in path.parent.iterdir()] == ["snap_2.pkl"]


def test_written_files_get_the_permissions_the_umask_allows(tmp_path):
    previous = os.umask(0o027)
    try:
        write_atomic({"w": torch.ones(3)}, tmp_path / "a.pkl")
    finally:
        os.umask(previous)
    assert (tmp_path / "a.pkl").stat().st_mode & 0o777 == 0o640


def test_full_disk_is_one_line_naming_the_file_and_free_space(tmp_path, monkeypatch):
    path = tmp_path / "snap.pkl"
    write_atomic({"w": torch.full((100,), 7.0)}, path)
    monkeypatch.setattr(files, "disk_free", lambda folder: 3 * MiB)
    fail_writes_after(monkeypatch, 4096)
    with pytest.raises(DiskFull) as caught:
        write_atomic({"w": torch.zeros(100_000)}, path)
    message = str(caught.value)
    assert "\n" not in message and "disk full" in message
    assert str(path) in message and "3.0 MiB free" in message
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert torch.equal(load(path)["w"], torch.full((100,), 7.0))  # the previous one, whole
    assert [p.name for p in tmp_path.iterdir()] == ["snap.pkl"]


def test_quota_exceeded_counts_as_a_full_disk(tmp_path, monkeypatch):
    fail_writes_after(monkeypatch, 0, errno.EDQUOT)
    with pytest.raises(DiskFull):
        write_atomic({"w": torch.zeros(10)}, tmp_path / "q.pkl")


def test_a_failing_cleanup_never_hides_the_first_error(tmp_path, monkeypatch):
    path = tmp_path / "snap.pkl"
    fail_writes_after(monkeypatch, 100)

    def unlink(self, missing_ok=False):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(DiskFull) as caught:
        write_atomic({"w": torch.zeros(100_000)}, path)
    message = str(caught.value)
    assert message.startswith("disk full: cannot write")
    assert "could not be removed (Permission denied)" in message and "\n" not in message


def test_other_write_errors_name_the_file(tmp_path, monkeypatch):
    fail_writes_after(monkeypatch, 0, errno.EIO)
    with pytest.raises(NotWritable, match=r"cannot write .*x\.pkl: Input/output error"):
        write_atomic({"w": torch.zeros(10)}, tmp_path / "x.pkl")


def _mount_tiny_tmpfs_or_skip() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("no `unshare` here to mount a private 1 MiB tmpfs")
    probe = subprocess.run(["unshare", "-rm", "sh", "-c",
                            "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True,
                           check=False)
    if probe.returncode:
        pytest.skip(f"cannot mount a private tmpfs here: {probe.stderr.decode().strip()}")
    return ["unshare", "-rm", "sh", "-c"]


@pytest.mark.slow  # 2 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_a_real_full_tmpfs_keeps_the_previous_snapshot(tmp_path):
    prefix = _mount_tiny_tmpfs_or_skip()
    disk = tmp_path / "disk"
    disk.mkdir()
    script = textwrap.dedent(f"""
        import json, torch
        from pathlib import Path
        from core.utils.files import DiskFull, write_atomic
        path = Path({str(disk)!r}) / "snap.pkl"
        write_atomic({{"w": torch.full((1000,), 3.0)}}, path)
        try:
            write_atomic({{"w": torch.zeros(2_000_000)}}, path)  # 8 MB on a 1 MiB disk
            error = None
        except DiskFull as err:
            error = str(err)
        print(json.dumps({{"error": error, "kept": torch.load(path)["w"][0].item(),
                          "files": sorted(p.name for p in path.parent.iterdir())}}))
    """)
    (tmp_path / "write.py").write_text(script)
    mount = f"mount -t tmpfs -o size=1m tmpfs {disk} && exec {sys.executable} {tmp_path}/write.py"
    out = subprocess.run([*prefix, mount], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    result = json.loads(out.stdout)
    assert result["error"].startswith(f"disk full: cannot write {disk / 'snap.pkl'} (")
    assert result["kept"] == 3.0 and result["files"] == ["snap.pkl"]


# ------------------------------------------------------------------------ stale temp files
def dead_process() -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    identity = process_identity(proc.pid)
    proc.kill()
    proc.wait()
    return identity


def test_temp_files_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    dead_pid, dead_start = dead_process()
    pid, start = process_identity(os.getpid())
    names = {
        "dead": f".a.pkl.{dead_pid}-{dead_start}.tmp",
        "dead_legacy": f".a.pkl.{dead_pid}.tmp",
        "reused_pid": f".a.pkl.{pid}-{int(start) - 1}.tmp",
        "mine": temp_path(tmp_path / "a.pkl").name,
        "mine_legacy": f".a.pkl.{pid}.tmp",
        "no_pid": ".notes.tmp",
        "snapshot": "a.pkl",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"x")
    removed = remove_stale_temp_files(tmp_path)
    assert sorted(p.name for p in removed) == sorted(
        names[k] for k in ("dead", "dead_legacy", "reused_pid"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        names[k] for k in ("mine", "mine_legacy", "no_pid", "snapshot"))


_KILLED_WRITER = """
import os, signal, sys, torch
from pathlib import Path
from core.utils.files import write_atomic, write_file_atomic
path = Path(sys.argv[1])
write_atomic({"w": torch.ones(4)}, path)
def die(file):
    file.write(b"half a snapshot")
    os.kill(os.getpid(), signal.SIGKILL)
write_file_atomic(path, die)
"""


def test_the_leftover_of_a_killed_write_is_found_and_removed(tmp_path):
    path = tmp_path / "snap.pkl"
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(path)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert proc.returncode == -signal.SIGKILL
    leftovers = [p for p in tmp_path.iterdir() if p.name != "snap.pkl"]
    assert len(leftovers) == 1 and leftovers[0].read_bytes() == b"half a snapshot"
    assert remove_stale_temp_files(tmp_path) == leftovers
    assert [p.name for p in tmp_path.iterdir()] == ["snap.pkl"]
    assert torch.equal(load(path)["w"], torch.ones(4))


# -------------------------------------------------------------------------- start-up checks
def test_probe_writable_creates_the_folder_and_leaves_nothing(tmp_path):
    folder = tmp_path / "cache" / "nnet" / "X"
    probe_writable(folder)
    assert folder.is_dir() and list(folder.iterdir()) == []


def test_probe_of_a_read_only_folder_is_one_line_saying_what_to_do(tmp_path, monkeypatch):
    real_open = os.open

    def read_only(path, flags, *args):
        if flags & os.O_WRONLY:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(NotWritable) as caught:
        probe_writable(tmp_path, "system.cache_dir")
    assert str(caught.value) == (f"cannot write in {tmp_path} (Read-only file system); make it "
                                 f"writable or point system.cache_dir at a folder you can "
                                 f"write to")


def test_probe_of_a_path_that_is_a_file_never_asks_to_delete_a_probe_that_never_was(tmp_path):
    not_a_folder = tmp_path / "results"
    not_a_folder.write_text("a file where a folder should be")
    with pytest.raises(NotWritable) as caught:
        probe_writable(not_a_folder, "--out")
    assert "delete" not in str(caught.value) and "partial file" not in str(caught.value)
    assert str(caught.value).startswith(f"cannot write in {not_a_folder} (a file, not a folder)")


_PROBE = """
import sys
from pathlib import Path
from core.utils.files import NotWritable, probe_writable
try:
    probe_writable(Path(sys.argv[1]))
except NotWritable as err:
    print(err)
"""


def test_probe_of_a_folder_without_write_permission_fails(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    if os.geteuid() != 0:
        with pytest.raises(NotWritable, match="Permission denied"):
            probe_writable(folder)
        return
    # Root writes through folder permissions: the probe runs as root without the capabilities
    # that override them (util-linux's setpriv), as a user's process would meet the folder.
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root, and no setpriv to drop the capability that writes "
                    "through folder permissions (util-linux)")
    done = subprocess.run([setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner",
                           "--", sys.executable, "-c", _PROBE, str(folder)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"cannot write in {folder} (Permission denied)"), done.stdout
    assert list(folder.iterdir()) == []


def test_probe_on_a_full_disk_says_disk_full(tmp_path, monkeypatch):
    fail_writes_after(monkeypatch, 0)
    with pytest.raises(DiskFull, match=f"disk full: cannot write in {tmp_path}"):
        probe_writable(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_snapshot_estimate_covers_a_real_snapshot_with_adam_state(tmp_path):
    model = torch.nn.Linear(1000, 1000)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 1000)).sum().backward()
    optimizer.step()
    num_params = sum(p.numel() for p in model.parameters())
    write_atomic({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                 tmp_path / "s.pkl")
    actual = (tmp_path / "s.pkl").stat().st_size
    assert actual <= snapshot_bytes(num_params, True) <= 1.15 * actual
    write_atomic({"model": model.state_dict()}, tmp_path / "m.pkl")
    weights = (tmp_path / "m.pkl").stat().st_size
    assert weights <= snapshot_bytes(num_params, False) <= weights + 2 * MiB


def test_free_disk_check_names_need_and_free(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "disk_free", lambda folder: 100 * MiB)
    check_free_disk(tmp_path, 100 * MiB)
    with pytest.raises(DiskFull) as caught:
        check_free_disk(tmp_path, 300 * MiB)
    assert str(caught.value) == (f"not enough free disk in {tmp_path}: two snapshots need "
                                 f"300.0 MiB, 100.0 MiB free; free some space or point "
                                 f"system.cache_dir at another disk")


def test_disk_free_reads_the_nearest_existing_folder(tmp_path):
    assert files.disk_free(tmp_path / "not" / "yet") == files.disk_free(tmp_path)


# ---------------------------------------------------------------------------- shared memory
@pytest.mark.parametrize("sampling", sorted(sampling_functions))  # every one
def test_image_bytes_matches_a_real_batch(coco128, tmp_path, sampling):
    from core.dbs import datasets

    system = SystemConfig().update_config({
        "batch_size": 3, "sampling_function": sampling, "cache_dir": str(tmp_path)})
    db_config = {"categories": 80, "input_size": [127, 191], "output_sizes": [[32, 48]],
                 "max_objects": 20, "image_dirs": {"all": str(coco128 / "images")},
                 "annotation_files": {"all": str(coco128 / "annotations" /
                                                 "instances_coco128.json")}}
    db = datasets["COCO"](db_config, split="all", sys_config=system)
    batch, _ = sampling_functions[sampling].batch(db, 0, 3, data_aug=True)
    arrays = sum(v.nbytes for v in batch.values() if hasattr(v, "nbytes"))
    assert arrays == 3 * image_bytes(db.configs, sampling)
    # the batch is its declared layout, array by array
    assert {key: (v.shape, v.dtype) for key, v in batch.items() if key != "meta"} == {
        key: ((3, *shape), np.dtype(dtype))
        for key, (shape, dtype) in sampling_functions[sampling].layout(db.configs).items()}


def test_shm_need_is_what_the_prefetcher_allocates():
    system = SystemConfig().update_config({"batch_size": 3, "prefetch_size": 9, "val_iter": 0})
    share = deal(system.batch_size, system.chunk_sizes, 0, 1)
    probe, _ = fake_sample(FakeDB(), 0, share.local_batch)
    per_batch = sum(v.nbytes for v in probe.values() if hasattr(v, "nbytes"))
    with Prefetcher(FakeDB, fake_sample, probe, share=share, workers=2, data_aug=True,
                    stream="train", seed=0, prefetch_size=system.prefetch_size) as data:
        ring = sum(t.nbytes for t in data._ring.values())
    assert ring == 2 * ring_slots(9, 2, "train") * per_batch == 2 * 3 * per_batch


def test_shm_need_counts_workers_slots_and_the_validation_ring():
    db = check_db_config({"input_size": [255, 255], "max_objects": 128})
    per_batch = 48 * (255 * 255 * 3 + 48 + 128 * 24 + 8)
    need = functools.partial(shm_need, db, "cornernet", prefetch_size=5)
    assert need(48, 4, validation=True) == (4 * 2 + 2) * per_batch
    assert need(48, 1, validation=True) == (3 + 2) * per_batch
    assert need(12, 1, validation=True) == (3 + 2) * per_batch // 4
    assert need(48, 2, validation=False) == 2 * 2 * per_batch


def test_too_little_shm_names_need_free_and_the_ways_out(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "disk_free", lambda folder: 64 * MiB)
    check_shm(64 * MiB, tmp_path)
    with pytest.raises(ShmTooSmall) as caught:
        check_shm(300 * MiB, tmp_path)
    assert str(caught.value) == (
        f"the prefetch rings need 300.0 MiB of shared memory but {tmp_path} has 64.0 MiB "
        f"free; use fewer --workers, a smaller system.prefetch_size, or more shared memory "
        f"(Docker: --shm-size=384m)")


def test_no_shm_folder_means_nothing_to_check(tmp_path):
    check_shm(10 ** 15, tmp_path / "absent")

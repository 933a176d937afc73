"""Helpers for the training tests: small configs on coco128, and train.py run in this process
(`run_train(..., inproc=True)`) or as a process of its own."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:  # imported as `tests._train_helpers` or, with tests/ on the path, `_train_helpers`
    from tests._inproc import Completed, run_script
except ImportError:
    from _inproc import Completed, run_script

REPO = Path(__file__).resolve().parents[1]


def write_config(tmp: Path, coco128: Path, name: str = "Tiny128", images: Path | None = None,
                 annotations: dict | None = None, db: dict | None = None, **system) -> Path:
    """A CornerNet_Tiny config on coco128 whose every path lies under `tmp`; returns its folder.
    No run report and no TensorBoard events (system.run_report, system.tensorboard): drawing
    the one and importing the other cost a second of CPU per run; their tests ask for them."""
    images = images or coco128 / "images"
    annotations = annotations or {
        "train": str(coco128 / "annotations" / "instances_coco128_train.json"),
        "val": str(coco128 / "annotations" / "instances_coco128_val.json"),
    }
    config = {
        "system": {
            "dataset": "COCO", "model": "CornerNet_Tiny", "sampling_function": "cornernet",
            "batch_size": 4, "train_split": "train", "val_split": "val", "test_split": "val",
            "learning_rate": 0.0005, "display": 1, "val_iter": 2, "snapshot": 2,
            "max_iter": 4, "stepsize": 3, "prefetch_size": 2,
            "cache_dir": str(tmp / "cache"), "result_dir": str(tmp / "results"),
            "data_dir": str(tmp / "data"), "run_report": False,
            "tensorboard": False, **system,
        },
        "db": {
            "categories": 80, "input_size": [128, 128], "output_sizes": [[32, 32]],
            "rand_scale_min": 0.6, "rand_scale_max": 1.4, "rand_scale_step": 0.1,
            "rand_scales": None, "rand_crop": True, "rand_color": True, "border": 32,
            "gaussian_bump": True, "gaussian_iou": 0.3, "max_objects": 32,
            "image_dirs": {"train": str(images), "val": str(images)},
            "annotation_files": annotations, **(db or {}),
        },
    }
    folder = tmp / "configs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(config, indent=1))
    return folder


def train_cmd(config_dir: Path, name: str = "Tiny128", *extra: str,
              device: str = "cpu") -> list[str]:
    """train.py on `device`: the CPU unless a test says otherwise, so that the CPU tests train
    on the CPU on a machine with GPUs too (and its --distributed runs are gloo processes)."""
    return [sys.executable, str(REPO / "train.py"), name, "--config-dir", str(config_dir),
            "--workers", "2", "--device", device, *extra]


def run_train(config_dir: Path, *extra: str, name: str = "Tiny128", timeout: float = 240,
              cmd: list[str] | None = None, env: dict | None = None, inproc: bool = False
              ) -> subprocess.CompletedProcess | Completed:
    """`python train.py <name> ...` on the CPU with 2 workers, one torch thread; returns its
    status, stdout and stderr.

    inproc=True runs the same command line in this process (`run_script`): no interpreter,
    torch import or fork server to start, so a run costs its training and a refusal at start
    milliseconds. The prefetch workers are real processes either way. A test that needs a
    process of the run's own (a signal sent from outside, a kill, a launcher, a mount
    namespace, a fresh import) keeps the default. `timeout` holds for a process only.
    """
    if inproc:
        if cmd is not None:
            raise ValueError("a command of its own (a launcher, a namespace) needs a process")
        return run_script("train.py", *train_cmd(config_dir, name, *extra)[2:],
                          env={"OMP_NUM_THREADS": "1", **(env or {})})
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(cmd or train_cmd(config_dir, name, *extra), capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env, check=False)


def run_spawned(config_dir: Path, procs: int, *extra: str, capfd: pytest.CaptureFixture,
                name: str = "Tiny128") -> Completed:
    """`train.py --distributed --procs-per-node <procs>` with its launcher in this process
    (`run_train(..., inproc=True)`): the ranks are spawned processes as ever, and what they
    print, on the file descriptors they inherit, is read with `capfd` and follows the
    launcher's own output. A launcher of its own is a torch import more, not another test."""
    capfd.readouterr()
    result = run_train(config_dir, "--distributed", "--world-size", "1", "--procs-per-node",
                       str(procs), *extra, name=name, inproc=True)
    ranks = capfd.readouterr()
    result.stdout += ranks.out
    result.stderr += ranks.err
    return result


def torchrun_cmd(config_dir: Path, procs: int, *extra: str, name: str = "Tiny128") -> list[str]:
    """torchrun (as `python -m torch.distributed.run`) starting train.py on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={procs}", *train_cmd(config_dir, name, "--distributed",
                                                     *extra)[1:]]


def node_cmd(config_dir: Path, node: int, port: int, *extra: str,
             name: str = "Tiny128") -> list[str]:
    """One of two nodes on localhost: train.py --distributed --world-size 2 --rank <node>."""
    return train_cmd(config_dir, name, "--distributed", "--world-size", "2", "--rank",
                     str(node), "--dist-url", f"tcp://127.0.0.1:{port}", *extra)


def losses(output: str) -> dict[int, str]:
    """Iteration -> the printed training loss (full precision text)."""
    return {int(it): loss for it, loss in re.findall(r"iteration (\d+): loss (\S+) ", output)}


def children(pid: int) -> set[int]:
    """Every live descendant of `pid`, read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def alive(pids: set[int]) -> set[int]:
    """The pids that still run (zombies count as gone)."""
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(pid)
    return out


def of_the_run(pids: set[int]) -> set[int]:
    """`pids` less multiprocessing's own helpers (a fork server, the resource tracker), which
    live as long as the process that started them."""
    return {pid for pid in pids
            if not any(kind in cmdline(pid) for kind in ("forkserver", "resource_tracker"))}


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Training:
    """train.py in the background, with its output collected line by line."""

    def __init__(self, config_dir: Path, *extra: str, name: str = "Tiny128",
                 cmd: list[str] | None = None, env: dict | None = None) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(cmd or train_cmd(config_dir, name, *extra), cwd=REPO,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self.seen: set[int] = set()
        self._scanned, self._eof = 0.0, False

    def _pump(self) -> bytes:
        """One pass of waiting on the run: its descendants added to `seen` (a walk of /proc costs
        milliseconds of CPU on a busy machine: five a second see every process the run keeps),
        then up to 50 ms for output; what was read (b"" for nothing)."""
        if time.monotonic() - self._scanned > 0.2:
            self.seen |= children(self.proc.pid)
            self._scanned = time.monotonic()
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([] if self._eof else [fd], [], [], 0.05)
        chunk = os.read(fd, 1 << 16) if ready else b""
        self._eof = self._eof or (bool(ready) and not chunk)  # end of file: only the exit is left
        return chunk

    def wait_for(self, pattern: str, timeout: float = 120) -> str:
        """Read output until a line matches; remembers every descendant seen meanwhile."""
        deadline = time.monotonic() + timeout
        buffer = ""
        while time.monotonic() < deadline:
            chunk = self._pump()
            buffer += chunk.decode(errors="replace")
            *done, buffer = buffer.split("\n")
            for line in done:
                self.lines.append(line)
                if re.search(pattern, line):
                    self.seen |= children(self.proc.pid)
                    return line
            if self.proc.poll() is not None and not chunk:
                break
        raise AssertionError(f"no line matching {pattern!r}; output:\n" + "\n".join(self.lines))

    def workers(self) -> list[int]:
        """The prefetch processes: the children of train.py's fork server."""
        pids = children(self.proc.pid)
        servers = {pid for pid in pids
                   if "forkserver" in cmdline(pid) and parent(pid) == self.proc.pid}
        return [pid for pid in pids if parent(pid) in servers]

    def finish(self, timeout: float) -> tuple[int, float, str]:
        """Wait for exit, still adding the run's descendants to `seen` (so that "no process
        was started" is observed, not assumed); returns (exit code, seconds waited, the whole
        output). A run still going after `timeout` seconds raises subprocess.TimeoutExpired."""
        t0 = time.monotonic()
        chunks = []
        while True:
            chunks.append(self._pump())
            if not chunks[-1] and self.proc.poll() is not None:
                break
            if time.monotonic() - t0 > timeout:
                raise subprocess.TimeoutExpired(self.proc.args, timeout)
        self.proc.wait()
        rest = b"".join(chunks).decode(errors="replace")
        return self.proc.returncode, time.monotonic() - t0, "\n".join(self.lines) + "\n" + rest

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def copy_snapshot(src_cache: Path, dst_cache: Path, name: str, iteration: int) -> None:
    src = src_cache / "nnet" / name / f"{name}_{iteration}.pkl"
    dst = dst_cache / "nnet" / name
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst / src.name)


def interrupted(config_dir: Path, pattern: str, *signums: int,
                **kwargs) -> tuple[int, str, set[int]]:
    """Start train.py, send `signums` once a line matches `pattern`, wait for the exit.

    Returns (exit code, the whole output, every process of the run seen while it ran).
    """
    run = Training(config_dir, **kwargs)
    try:
        run.wait_for(pattern)
        tree = set(run.seen)
        for signum in signums:
            run.proc.send_signal(signum)
        code, _, output = run.finish(timeout=60)
    finally:
        run.kill()
    return code, output, tree

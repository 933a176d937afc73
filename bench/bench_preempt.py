"""How long the resume signal needs: from SIGUSR1 to the snapshot on disk and to the exit.

train.py on ../shared/data/coco128 (a shipped config, small input) is signalled the way SLURM's
`--signal=USR1@<s>` does it, every process of the run at once (the process group), once
`--after` iterations have run; the time until the stop's snapshot file appears (it is renamed
into place whole) and until train.py exits is printed per trial. `#SBATCH --signal=USR1@<s>`
must leave more than the exit time plus SLURM's 0-30 s of lateness.

    python bench/bench_preempt.py                               # CornerNet_Tiny, CPU
    python bench/bench_preempt.py --config CornerNet_Squeeze --batch 2 --input-size 255 \
        --output-size 32 --after 2
    python bench/bench_preempt.py --config CornerNet --device cuda --batch 4   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _shared import coco128_dir  # bench/ is the script's folder

REPO = Path(__file__).resolve().parents[1]
COCO128 = coco128_dir() or REPO.parent / "shared" / "data" / "coco128"


def write_config(folder: Path, name: str, batch: int, input_size: int, output_size: int
                 ) -> Path:
    """configs/<name>.json on coco128 with periodic snapshots off; returns the config folder."""
    config = json.loads((REPO / "configs" / f"{name}.json").read_text())
    config["system"].update(
        cache_dir=str(folder / "cache"), result_dir=str(folder / "results"), batch_size=batch,
        chunk_sizes=None, max_iter=100000, snapshot=100000, val_iter=0, display=1,
        prefetch_size=2, train_split="train", val_split="val", eval_iter=0, pretrain=None,
        dataset="COCO", model=config["system"].get("model") or name)
    side = input_size
    outputs = [[output_size, output_size]]
    config["db"].update(
        categories=80, input_size=[side, side],
        output_sizes=outputs if name != "CornerNet_Saccade" else config["db"]["output_sizes"],
        image_dirs={"train": str(COCO128 / "images"), "val": str(COCO128 / "images")},
        annotation_files={split: str(COCO128 / "annotations" / f"instances_coco128_{split}.json")
                          for split in ("train", "val")})
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    (folder / "configs" / f"{name}.json").write_text(json.dumps(config))
    return folder / "configs"


def trial(args: argparse.Namespace, folder: Path) -> tuple[int, float, float, int]:
    """One signalled run: (iteration stopped at, s to snapshot on disk, s to exit, status)."""
    config_dir = write_config(folder, args.config, args.batch, args.input_size,
                              args.output_size or (args.input_size + 1) // 4)
    cmd = [sys.executable, str(REPO / "train.py"), args.config, "--config-dir", str(config_dir),
           "--workers", str(args.workers)]
    if args.device:
        cmd += ["--device", args.device]
    if args.procs > 1:
        cmd += ["--distributed", "--world-size", "1", "--procs-per-node", str(args.procs)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    pattern = re.compile(rf"iteration {args.after}: loss")
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if pattern.search(line):
            break
    else:
        sys.exit(f"train.py ended before iteration {args.after}:\n" + "".join(seen[-20:]))
    snapshots = folder / "cache" / "nnet" / args.config
    t0 = time.perf_counter()
    os.killpg(proc.pid, signal.SIGUSR1)  # as SLURM: every process of the step
    on_disk = None
    while proc.poll() is None or on_disk is None:
        if on_disk is None and any(snapshots.glob(f"{args.config}_*.pkl")):
            on_disk = time.perf_counter() - t0
        if proc.poll() is not None and on_disk is None:
            break
        time.sleep(0.01)
    exited = time.perf_counter() - t0
    output = proc.stdout.read()
    stopped = re.search(r"stopped by signal after iteration (\d+)", output)
    if not stopped:
        sys.exit(f"train.py did not stop by the signal (status {proc.returncode}):\n"
                 + output[-2000:])
    return (int(stopped.group(1)) if stopped else -1, on_disk or float("nan"), exited,
            proc.returncode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="CornerNet_Tiny")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--input-size", type=int, default=127)
    parser.add_argument("--output-size", type=int, default=None,
                        help="default (input + 1) / 4; CornerNet_Squeeze: (input + 1) / 8")
    parser.add_argument("--procs", type=int, default=1, help="processes (gloo without GPUs)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default=None)
    parser.add_argument("--after", type=int, default=5, help="signal after this iteration")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.config}, input {args.input_size}, batch {args.batch}, {args.procs} "
          f"process(es), {args.workers} workers, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} cores")
    rows = []
    for number in range(args.trials):
        with tempfile.TemporaryDirectory() as tmp:
            iteration, on_disk, exited, status = trial(args, Path(tmp))
        rows.append((on_disk, exited))
        print(f"trial {number + 1}: stopped after iteration {iteration}, snapshot on disk "
              f"{on_disk:.2f} s, exit {exited:.2f} s after the signal, status {status}")
    print(f"median: snapshot on disk {statistics.median(r[0] for r in rows):.2f} s, exit "
          f"{statistics.median(r[1] for r in rows):.2f} s; max exit "
          f"{max(r[1] for r in rows):.2f} s")


if __name__ == "__main__":
    main()

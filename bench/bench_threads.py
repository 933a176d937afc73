#!/usr/bin/env python3
"""test.py's speed by thread count, idle and beside busy processes, in one run.

    python bench/bench_threads.py [--images 128] [--busy 2] [--repeats 1]

One CornerNet_Tiny snapshot (random weights, COCO's 80 classes) is evaluated by test.py on
coco128's images (all 128 by default, at its test scale 0.5) as a process of its own, so that
each row starts its own OpenMP runtime with the settings the row names. Rows: 1 thread; the
default (no setting); the default with `--busy` processes beside it, each spinning numpy on one
core; and 1 thread beside them. Each row prints ms per image (test.py's own count of its
detection loop), the threads test.py chose and how many images it computed at once, the CPUs
this process may use and the load average when the row ended: the machine may be shared, so
an idle row is only as idle as the load says.
`--before` adds the default and busy rows with OpenMP's own wait policy (test.py's before).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _checkout  # noqa: F401 - the checkout's root on sys.path, before core
from _coco128 import COCO128, MISSING

ROOT = Path(__file__).resolve().parents[1]

# An empty OMP_WAIT_POLICY is kept by test.py (the user set it) and read by GNU OpenMP as unset
# (after a one-line complaint on stderr): its own policy, spinning before it sleeps.
BEFORE = {"OMP_WAIT_POLICY": ""}
SPIN = ("import numpy as np, time\n"
        "a = np.random.rand(256, 256)\n"
        "while True:\n"
        "    a = np.tanh(a @ a)\n")


def write_run(tmp: Path) -> Path:
    """configs/TinyCoco.json under `tmp` (CornerNet_Tiny's settings on coco128, all images)
    and its snapshot 0 with random weights; returns the config folder."""
    from core.config import load_config
    from core.dbs import datasets
    from core.nnet.py_factory import NetworkFactory

    tiny = json.loads((ROOT / "configs" / "CornerNet_Tiny.json").read_text())
    tiny["system"].update({"dataset": "COCO", "val_split": "all", "max_iter": 1,
                           "cache_dir": str(tmp / "cache"), "result_dir": str(tmp / "res")})
    tiny["db"].update({"categories": 80, "test_scales": [0.5],
                       "image_dirs": {"all": str(COCO128 / "images")},
                       "annotation_files": {"all": str(COCO128 / "annotations" /
                                                       "instances_coco128.json")}})
    (tmp / "configs").mkdir()
    (tmp / "configs" / "TinyCoco.json").write_text(json.dumps(tiny))
    system_config, db_config = load_config("TinyCoco", tmp / "configs")
    db = datasets["COCO"](db_config, split=None, sys_config=system_config)
    NetworkFactory(system_config, db, device="cpu").save_params(0)
    return tmp / "configs"


def busy(count: int) -> list[subprocess.Popen]:
    """`count` processes each keeping one core busy (numpy on one thread)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    return [subprocess.Popen([sys.executable, "-c", SPIN], env=env) for _ in range(count)]


def test_py(configs: Path, images: int, env: dict[str, str]) -> tuple[float, str]:
    """(ms per image of test.py's detection loop, the thread line it printed)."""
    command = [sys.executable, str(ROOT / "test.py"), "TinyCoco", "--config-dir", str(configs),
               "--device", "cpu", "--images", str(images), "--testiter", "0", "--split",
               "validation", "--backend", "none", "--no-resume"]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    if done.returncode != 0:
        raise SystemExit(f"test.py failed ({done.returncode}): {done.stderr.strip()[-600:]}")
    found = re.search(r"([\d.]+) ms per image", done.stdout)
    # the thread line at the start, and how many images at once
    threads = " | ".join(line.split("; ")[-1] if line.startswith("loading") else line
                         for line in done.stdout.splitlines()
                         if "threads:" in line or "at once" in line)
    if found is None:
        raise SystemExit(f"no 'ms per image' in test.py's output:\n{done.stdout[-600:]}")
    return float(found.group(1)), threads.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--busy", type=int, default=2, help="busy processes beside test.py")
    parser.add_argument("--repeats", type=int, default=1, help="runs per row (best kept)")
    parser.add_argument("--before", action="store_true",
                        help="also the default threads with OpenMP's own wait policy (spinning "
                             "a while), as test.py ran before it chose passive waiting")
    args = parser.parse_args()
    if not (COCO128 / "annotations" / "instances_coco128.json").is_file():
        raise SystemExit(MISSING)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rows = [("1 thread (OMP_NUM_THREADS=1)", {"OMP_NUM_THREADS": "1"}, 0),
            ("default", {}, 0),
            (f"default, {args.busy} busy processes beside", {}, args.busy),
            (f"1 thread, {args.busy} busy processes beside", {"OMP_NUM_THREADS": "1"},
             args.busy)]
    if args.before:
        rows += [("before: OpenMP's own wait", BEFORE, 0),
                 (f"before: OpenMP's own wait, {args.busy} busy", BEFORE, args.busy)]
    print(f"test.py, CornerNet_Tiny (random weights), {args.images} coco128 images at scale "
          f"0.5; {cpus} CPUs usable of {os.cpu_count()}; best of {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        configs = write_run(Path(tmp))
        for label, env, spinners in rows:
            procs = busy(spinners)
            try:
                time.sleep(1.0 if spinners else 0.0)
                runs = [test_py(configs, args.images, env) for _ in range(args.repeats)]
            finally:
                for proc in procs:
                    proc.kill()
                    proc.wait()
            ms, threads = min(runs)
            load = " ".join(f"{v:.2f}" for v in os.getloadavg())
            print(f"{label:<40} {ms:7.1f} ms/image   [{threads or 'no thread line'}]   "
                  f"load {load}")


if __name__ == "__main__":
    main()

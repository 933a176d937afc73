"""What a training run did, read from the files its rank 0 writes, whichever launcher ran it.

A run's folder (`cache/nnet/<name>/`) holds its numbered snapshots `<name>_<iter>.pkl`, the best
one `<name>_best.pkl` with its record ({"iteration", "AP"}), and `metrics.jsonl`, one line per
iteration that put values, an evaluation's line with its AP. Rank 0 writes them whether it runs
in the caller's process, a spawned one, or under torchrun or srun, so that reading them back
needs nothing from the process that trained.

The folder may hold another run's files (an earlier run of the same name, one that a failed
start did not replace): `state` is taken before the run, and only the files written since count
as this run's records.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from ..config import load_config
from ..data.from_data import run_folder
from .metrics import EVAL_KEYS, read_lines
from .options import TrainOptions

METRICS = "metrics.jsonl"
# what an evaluation puts on its metrics line (run.Run.evaluated), with its "iteration"
EVALUATION_KEYS = (*EVAL_KEYS, "best_AP", "best_iteration", "eval_weights")

State = dict[str, tuple[int, int]]


def where(options: TrainOptions) -> tuple[str, Path]:
    """(the run's name, its folder) of the run `options` start: the config's snapshot folder,
    with --data the run's own (core/data/from_data.py)."""
    if options.data is not None:
        return run_folder(options.cfg_file, options.data, options.name, options.overrides,
                          options.config_dir)
    system, _ = load_config(options.cfg_file, options.config_dir, overrides=options.overrides)
    return system.snapshot_name, system.snapshot_dir


def state(folder: Path) -> State:
    """{file name: (inode, modification time in ns)} of `folder`: what a later `read` compares
    with (a file rewritten in place or replaced gets a new time or inode)."""
    if not folder.is_dir():
        return {}
    found = {}
    for path in folder.iterdir():
        try:
            info = path.stat()
        except OSError:  # removed meanwhile
            continue
        found[path.name] = (info.st_ino, info.st_mtime_ns)
    return found


def read(folder: Path, name: str, before: State) -> dict[str, Any]:
    """The records of the run `name` in `folder` written since `before` (`state`), as
    {"snapshots", "best", "best_ap", "metrics", "evaluations", "iteration"}:

    - snapshots: every snapshot file in the folder (sorted), also those of earlier calls;
    - evaluations: each evaluation of the run's history in metrics.jsonl (a resumed run's file
      continues the one resumed), its iteration, AP keys and best so far; metrics: the last;
    - best, best_ap: `<name>_best.pkl` and its record's AP (None before any best);
    - iteration: the last iteration the records show (a numbered snapshot written since
      `before`, or a metrics line), None when the run wrote neither (a failed start,
      `--dry-run`).

    metrics.jsonl is rewritten when the loop starts, so that one not written since `before`
    belongs to another run: then there are no evaluations and no best."""
    now = state(folder)
    fresh = {file for file, stamp in now.items() if before.get(file) != stamp}
    pattern = re.compile(rf"{re.escape(name)}_(0|[1-9]\d*)\.pkl")
    done = [int(match.group(1)) for file in fresh if (match := pattern.fullmatch(file))]
    lines = read_lines(folder / METRICS) if METRICS in fresh else []
    evaluations = [{"iteration": line["iteration"],
                    **{key: line[key] for key in EVALUATION_KEYS if key in line}}
                   for line in lines if "AP" in line]
    best_file = folder / f"{name}_best.pkl"
    record = _best_record(best_file) if METRICS in fresh and best_file.name in now else None
    iterations = done + [line["iteration"] for line in lines]
    return {"snapshots": sorted(folder.glob("*.pkl")) if now else [],
            "best": best_file if record is not None else None,
            "best_ap": None if record is None else record["AP"],
            "metrics": evaluations[-1] if evaluations else None,
            "evaluations": evaluations,
            "iteration": max(iterations) if iterations else None}


def _best_record(path: Path) -> dict | None:
    """The {"iteration", "AP"} record the best snapshot holds (None: unreadable or none)."""
    try:  # memory-mapped: the weights are not read
        snapshot = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - a damaged best snapshot has no record to give
        return None
    record = snapshot.get("best") if isinstance(snapshot, dict) else None
    return dict(record) if record is not None else None

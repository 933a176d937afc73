"""A CornerNet_Tiny config on coco128's val split with a snapshot at iteration 0, and runners
for the command-line scripts: `inproc` in the test process (tests/_inproc.py), `run` as a
process of its own (for what only a process has: signals, kills, its own start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from _inproc import Completed, run_script

from core.config import load_config
from core.dbs import datasets
from core.nnet.py_factory import NetworkFactory

ROOT = Path(__file__).resolve().parents[1]


def make_tiny_coco(coco128: Path, tmp_path: Path, **db_overrides) -> Path:
    """Write configs/CocoTiny.json under `tmp_path` and its snapshot 0; return `tmp_path`.

    The snapshot is untrained except that its heatmap heads favour class 1 (person), so that
    top-left and bottom-right corners agree in class and real detections come out.
    """
    config = {
        "system": {"dataset": "COCO", "model": "CornerNet_Tiny", "val_split": "val",
                   "test_split": "val", "max_iter": 1, "cache_dir": str(tmp_path / "cache"),
                   "result_dir": str(tmp_path / "results")},
        "db": {"categories": 80, "input_size": [128, 128], "output_sizes": [[32, 32]],
               "test_scales": [0.25], "test_flipped": True, "top_k": 20, "num_dets": 100,
               "ae_threshold": 100,
               "image_dirs": {"val": str(coco128 / "images")},
               "annotation_files": {"val": str(coco128 / "annotations" /
                                               "instances_coco128_val.json")},
               **db_overrides},
    }
    (tmp_path / "configs").mkdir(exist_ok=True)
    (tmp_path / "configs" / "CocoTiny.json").write_text(json.dumps(config))
    person_snapshot(tmp_path / "configs", "CocoTiny")
    return tmp_path


def person_snapshot(folder: Path, name: str, split: str | None = None) -> None:
    """Snapshot 0 of config `name` in `folder`: untrained (seed 0, so every call writes the same
    one) except that its heatmap heads favour class 1 (person), so that real detections come out
    and AP is not 0. `split`: the dataset's split the factory is built with (None: none)."""
    system_config, db_config = load_config(name, folder)
    db = datasets[system_config.dataset](db_config, split=split, sys_config=system_config)
    torch.manual_seed(0)
    nnet = NetworkFactory(system_config, db, device="cpu")
    with torch.no_grad():
        for heads in (nnet.model.tl_heats, nnet.model.br_heats):
            heads[-1][-1].bias[0] += 4
    nnet.save_params(0)


def script(name: str, *args: object) -> list[str]:
    """The command line of `python <name> args...` from this worktree."""
    return [sys.executable, str(ROOT / name), *map(str, args)]


def script_env(**extra: str) -> dict[str, str]:
    """The environment for a script run: this worktree first on the import path."""
    path = os.pathsep.join([*extra.pop("PYTHONPATH_FIRST", "").split(os.pathsep), str(ROOT)])
    return {**os.environ, "PYTHONPATH": path.strip(os.pathsep), **extra}


def run(name: str, *args: object, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(script(name, *args), check=False, capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=script_env(**env))


def inproc(name: str, *args: object, **env: str) -> Completed:
    """`run` in this process: the same status and output without a new interpreter's start."""
    return run_script(name, *args, env=env)

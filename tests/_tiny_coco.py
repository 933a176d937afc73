"""A CornerNet_Tiny config on coco128's val split with a snapshot at iteration 0; one over two
pictures whose classes have names and ids of their own (`named_run`, conftest's fixture of that
name); and runners for the command-line scripts: `inproc` in the test process
(tests/_inproc.py), `run` as a process of its own (for what only a process has: signals, kills,
its own start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
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


# The classes of `named_run`: names of their own, and ids that are not 1..C, so that a test sees
# whether they travel as they are.
NAMES = ["triangle", "square"]
IDS = [3, 7]


def write_named_pictures(root: Path) -> tuple[Path, Path]:
    """Two 96x96 pictures, a box each (classes IDS), and their COCO annotations under
    `root`/data; returns the image folder and the annotation file."""
    images = root / "data" / "images"
    images.mkdir(parents=True)
    entries, annotations = [], []
    for k in range(2):
        picture = np.full((96, 96, 3), 40 * (k + 1), np.uint8)
        cv2.rectangle(picture, (20, 20), (60, 70), (255, 255, 255), -1)
        cv2.imwrite(str(images / f"{k}.jpg"), picture)
        entries.append({"id": k + 1, "file_name": f"{k}.jpg", "width": 96, "height": 96})
        annotations.append({"id": k + 1, "image_id": k + 1, "category_id": IDS[k],
                            "bbox": [20, 20, 40, 50], "area": 2000, "iscrowd": 0})
    categories = [{"id": i, "name": n} for i, n in zip(IDS, NAMES)]
    annotation_file = root / "data" / "val.json"
    annotation_file.write_text(json.dumps({"images": entries, "annotations": annotations,
                                           "categories": categories}))
    return images, annotation_file


def named_run(root: Path) -> Path:
    """configs/Names.json, a CornerNet_Tiny config over the two named pictures, and its
    snapshot 0 (heads favouring class 1 so that boxes come out), all under `root`; returns it."""
    images, annotation_file = write_named_pictures(root)
    config = {"system": {"dataset": "COCO", "model": "CornerNet_Tiny", "val_split": "val",
                         "train_split": "val", "max_iter": 1,
                         "cache_dir": str(root / "cache"), "result_dir": str(root / "results")},
              "db": {"categories": 2, "input_size": [64, 64], "output_sizes": [[16, 16]],
                     "test_scales": [1], "test_flipped": False, "top_k": 10, "num_dets": 20,
                     "ae_threshold": 100, "image_dirs": {"val": str(images)},
                     "annotation_files": {"val": str(annotation_file)}}}
    (root / "configs").mkdir()
    (root / "configs" / "Names.json").write_text(json.dumps(config))
    person_snapshot(root / "configs", "Names", split="val")  # the split records the names
    return root


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

"""test.py and demo.py end to end on coco128 with an untrained CornerNet_Tiny snapshot, on CPU."""

import json
import math
import subprocess
import sys
from pathlib import Path

import cv2
import pytest
import torch

from core.config import load_config
from core.dbs import datasets
from core.inference.coco_eval import METRIC_NAMES
from core.nnet.py_factory import NetworkFactory

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_coco(coco128, tmp_path):
    """A config CocoTiny (CornerNet_Tiny on coco128's val split) with a snapshot at iteration 0.

    The snapshot is untrained except that its heatmap heads favour class 1 (person), so that
    top-left and bottom-right corners agree in class and real detections come out.
    """
    config = {
        "system": {"dataset": "COCO", "model": "CornerNet_Tiny", "val_split": "val",
                   "test_split": "val", "max_iter": 0, "cache_dir": str(tmp_path / "cache"),
                   "result_dir": str(tmp_path / "results")},
        "db": {"categories": 80, "input_size": [128, 128], "output_sizes": [[32, 32]],
               "test_scales": [0.25], "test_flipped": True, "top_k": 20, "num_dets": 100,
               "ae_threshold": 100,
               "image_dirs": {"val": str(coco128 / "images")},
               "annotation_files": {"val": str(coco128 / "annotations" /
                                               "instances_coco128_val.json")}},
    }
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "CocoTiny.json").write_text(json.dumps(config))
    system_config, db_config = load_config("CocoTiny", tmp_path / "configs")
    db = datasets["COCO"](db_config, split=None, sys_config=system_config)
    nnet = NetworkFactory(system_config, db, device="cpu")
    with torch.no_grad():
        for heads in (nnet.model.tl_heats, nnet.model.br_heats):
            heads[-1][-1].bias[0] += 4
    nnet.save_params(0)
    return tmp_path


def run(script, *args):
    return subprocess.run([sys.executable, str(ROOT / script), *map(str, args)],
                          check=False, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def test_test_py_writes_results_and_finite_metrics(tiny_coco):
    done = run("test.py", "CocoTiny", "--config-dir", tiny_coco / "configs", "--device", "cpu",
               "--debug", "--debug-images", 2)
    assert done.returncode == 0, done.stderr
    out = tiny_coco / "results" / "CocoTiny" / "0" / "val"
    results = json.loads((out / "results.json").read_text())
    assert {r["image_id"] for r in results} == {529, 531}  # the first two of the val split
    assert {r["category_id"] for r in results} == {1}
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert list(metrics) == list(METRIC_NAMES)
    assert all(math.isfinite(v) and -1 <= v <= 1 for v in metrics.values())
    pictures = sorted(p.name for p in (out / "vis").iterdir())
    assert len(pictures) == 2 and cv2.imread(str(out / "vis" / pictures[0])) is not None


def test_suffix_config_reuses_the_snapshot_and_gets_its_own_folder(tiny_coco):
    config = json.loads((tiny_coco / "configs" / "CocoTiny.json").read_text())
    config["db"]["test_scales"] = [0.25, 0.5]
    (tiny_coco / "configs" / "CocoTiny-two_scales.json").write_text(json.dumps(config))
    done = run("test.py", "CocoTiny", "--suffix", "two_scales", "--config-dir",
               tiny_coco / "configs", "--images", 1, "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert (tiny_coco / "results" / "CocoTiny" / "0" / "val" / "two_scales" /
            "metrics.json").is_file()


def test_demo_draws_pictures(tiny_coco, coco128):
    image = coco128 / "images" / "000000000529.jpg"
    done = run("demo.py", "CocoTiny", "--testiter", 0, "--images", image, "--out",
               tiny_coco / "pictures", "--thresh", 0.0, "--device", "cpu",
               "--config-dir", tiny_coco / "configs")
    assert done.returncode == 0, done.stderr
    drawn = cv2.imread(str(tiny_coco / "pictures" / "000000000529.jpg"))
    assert drawn.shape == cv2.imread(str(image)).shape

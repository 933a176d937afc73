"""The report of an evaluation: PR curves whose areas are the printed APs, and its pictures."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from _train_helpers import REPO
from _yolo_voc import noisy_truth

from core.config import SystemConfig
from core.dbs import datasets
from core.inference.coco_eval import score
from core.inference.report import NO_MATPLOTLIB, PICTURES, area

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def evaluated(coco128, tmp_path_factory):
    """coco128 val scored on noisy ground truth, as test.py scores it (score())."""
    tmp = tmp_path_factory.mktemp("report")
    system_config = SystemConfig().update_config({"cache_dir": str(tmp / "cache"),
                                                  "val_split": "val"})
    db = datasets["COCO"]({"image_dirs": {"val": str(coco128 / "images")},
                           "annotation_files": {"val": str(
                               coco128 / "annotations" / "instances_coco128_val.json")}},
                          split="val", sys_config=system_config)
    out = tmp / "results"
    metrics = score(db, noisy_truth(db, np.random.default_rng(0)), out,
                    image_ids=[db.image_id(i) for i in range(len(db))])
    return out, metrics


@pytest.mark.slow  # 2 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_the_pr_curves_areas_are_the_printed_ap50_and_ap75(evaluated):
    out, metrics = evaluated
    curves = json.loads((out / "pr_curves.json").read_text())
    per_class = {row["name"]: row for row in
                 json.loads((out / "metrics.json").read_text())["per_class"]}
    assert 0.3 < metrics["AP50"] < 0.95 and metrics["AP75"] < metrics["AP50"]
    assert len(curves["recall"]) == 101
    for iou, key in (("0.5", "AP50"), ("0.75", "AP75")):
        assert round(area(curves[iou]["overall"]), 3) == round(metrics[key], 3)
        assert curves[iou]["per_class"].keys() == per_class.keys()
        measured = 0
        for name, curve in curves[iou]["per_class"].items():
            if per_class[name][key] is None:
                assert curve is None  # no ground truth in val: no curve
                continue
            measured += 1
            assert round(area(curve), 3) == round(per_class[name][key], 3), (name, iou)
        assert measured > 20  # most of coco128's val classes
    # A curve is a precision: in [0, 1], not increasing with recall (COCO's interpolation).
    overall = np.array(curves["0.5"]["overall"])
    assert overall.min() >= 0 and overall.max() <= 1 and np.all(np.diff(overall) <= 1e-12)


def test_the_pictures_are_pngs(evaluated):
    out, _ = evaluated
    pytest.importorskip("matplotlib")
    for name in PICTURES:
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name


@pytest.mark.slow  # 2 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_without_matplotlib_one_line_and_the_metrics_still_written(tmp_path):
    code = f"""
import sys
sys.modules["matplotlib"] = None  # import matplotlib now raises ImportError
sys.path.insert(0, {str(REPO / "tests")!r})
import _handbuilt as hand
from core.inference.coco_eval import score
annotation_file, _ = hand.write(__import__("pathlib").Path({str(tmp_path / "set")!r}))
metrics = score(hand.dataset(annotation_file), hand.detections(), {str(tmp_path / "out")!r},
                image_ids=list(range(1, 8)))
print("AP50", metrics["AP50"])
"""
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "need matplotlib" in line]
    assert lines == [NO_MATPLOTLIB]
    assert (tmp_path / "out" / "metrics.json").is_file()
    assert not any((tmp_path / "out" / name).exists() for name in PICTURES)

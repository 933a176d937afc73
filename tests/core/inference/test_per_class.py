"""Per-category AP and AP50 on the hand-built set: known values, a table, and the summary."""

from __future__ import annotations

import json

import pytest

from core.inference.coco_eval import score
from tests import _handbuilt as hand


@pytest.mark.parametrize("backend", ["faster", "pycocotools"])
def test_per_class_ap_is_known_and_its_mean_is_the_summary(tmp_path, backend, capsys):
    annotation_file, _ = hand.write(tmp_path / "set")
    metrics = score(hand.dataset(annotation_file), hand.detections(), tmp_path / "out",
                    backend=backend, image_ids=list(range(1, 8)), class_table=True)
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    rows = {row["name"]: row for row in saved["per_class"]}
    assert [row["id"] for row in saved["per_class"]] == [1, 2, 3, 4]
    assert rows["car"]["AP"] == pytest.approx(1.0) and rows["car"]["AP50"] == pytest.approx(1.0)
    assert rows["dog"]["AP"] == 0.0 and rows["dog"]["AP50"] == 0.0
    assert rows["unicorn"]["AP"] is None and rows["unicorn"]["AP50"] is None  # no objects
    assert rows["cat"]["AP50"] == pytest.approx(hand.CAT["C50"])
    measured = [rows[name] for name in ("cat", "dog", "car")]
    assert sum(r["AP"] for r in measured) / 3 == pytest.approx(metrics["AP"], rel=1e-6)
    assert sum(r["AP50"] for r in measured) / 3 == pytest.approx(metrics["AP50"], rel=1e-6)
    assert saved["metrics"] == metrics and saved["weights"] == "raw"
    table = capsys.readouterr().out
    assert "car        1.000   1.000" in table and "dog        0.000   0.000" in table
    assert "unicorn        -       -" in table


def test_without_the_table_flag_only_the_summary_is_printed(tmp_path, capsys):
    annotation_file, _ = hand.write(tmp_path / "set")
    score(hand.dataset(annotation_file), hand.detections(), tmp_path / "out",
          image_ids=list(range(1, 8)))
    assert "category" not in capsys.readouterr().out

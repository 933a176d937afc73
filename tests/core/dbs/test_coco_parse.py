"""The COCO parse's column path (whole columns at once, masks skipped unread) gives exactly what
the one-annotation-at-a-time path gives: the same float32 boxes in the same order, the same
crowd regions, messages and clipped images; on odd files it leaves the work to that path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.dbs import DatasetError, coco_parse
from core.dbs.coco_parse import _without_masks, parse_instances


def _content(rng: np.random.Generator) -> dict:
    categories = [{"id": k, "name": f"c{k}"} for k in (7, 3, 12, 90)]  # unsorted, with gaps
    images = [{"id": 100 + k, "file_name": f"{k}.jpg", "width": 64 + k, "height": 48}
              for k in range(30)]
    annotations = []
    for k in range(400):
        image = images[int(rng.integers(0, 30))]
        x, y = (float(v) for v in rng.uniform(-20, 70, 2))
        w, h = (float(v) for v in rng.uniform(-3, 40, 2))
        if k % 7 == 0:
            x, y, w, h = int(x), int(y), int(w), int(h)  # integers, as some exporters write
        if k % 11 == 0:
            w = 0.0  # zero size
        mask = ({"counts": [1, 2, 3], "size": [48, 64]} if k % 9 == 0 else
                [] if k % 13 == 0 else [[x, y, x + w, y, x + w, y + h]])
        annotations.append({"id": k + 1, "image_id": image["id"], "segmentation": mask,
                            "category_id": categories[k % 4]["id"], "bbox": [x, y, w, h],
                            "area": abs(w * h), "iscrowd": int(k % 9 == 0)})
    return {"images": images, "annotations": annotations, "categories": categories}


def _both(raw: bytes, path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    fast = parse_instances(raw, path)
    with monkeypatch.context() as patch:
        patch.setattr(coco_parse, "_fast_tables", lambda *args: None)
        patch.setattr(coco_parse, "_without_masks", lambda raw: (b"", 0))
        slow = parse_instances(raw, path)
    return fast, slow


def _assert_same(fast: dict, slow: dict) -> None:
    assert fast.keys() == slow.keys()
    for key, value in slow.items():
        if isinstance(value, np.ndarray):
            assert fast[key].dtype == value.dtype and np.array_equal(fast[key], value), key
        else:
            assert fast[key] == value, key


@pytest.mark.parametrize("indent", [None, 2])
def test_the_column_path_equals_the_annotation_path(tmp_path, monkeypatch, indent):
    content = _content(np.random.default_rng(0))
    raw = json.dumps(content, indent=indent).encode()
    stripped, masks = _without_masks(raw)
    assert masks == 400 and b"counts" not in stripped and len(stripped) < len(raw)
    fast, slow = _both(raw, tmp_path / "a.json", monkeypatch)
    _assert_same(fast, slow)
    assert len(fast["problems"]) == 3  # clipped, zero size, outside: all three kinds occur
    assert len(fast["crowds"]) > 0 and len(fast["clipped_images"]) == 3


def test_coco128_parses_the_same_both_ways(coco128, monkeypatch):
    path = coco128 / "annotations" / "instances_coco128.json"
    _assert_same(*_both(path.read_bytes(), path, monkeypatch))


def test_odd_files_fall_back_and_errors_still_name_the_annotation(tmp_path, monkeypatch):
    content = _content(np.random.default_rng(1))
    content["images"][0]["file_name"] = 'x"segmentation": [[1]].jpg'  # the key inside a text
    del content["annotations"][5]["segmentation"]  # one without a mask
    fast, slow = _both(json.dumps(content).encode(), tmp_path / "b.json", monkeypatch)
    _assert_same(fast, slow)
    assert fast["file_names"][0] == 'x"segmentation": [[1]].jpg'
    content["annotations"][17]["bbox"] = [1, 2, True, 4]  # a bool is not a number
    with pytest.raises(DatasetError, match=r"annotation id 18: bbox must be \[x, y, w, h\]"):
        parse_instances(json.dumps(content).encode(), tmp_path / "c.json")
    content["annotations"][17]["bbox"] = [1, 2, 3, 4]
    content["annotations"][30]["image_id"] = 5
    with pytest.raises(DatasetError, match=r"annotation id 31: unknown image id 5"):
        parse_instances(json.dumps(content).encode(), tmp_path / "d.json")
    content["annotations"][30]["image_id"] = content["images"][0]["id"]
    content["images"] = []  # annotations without any image
    with pytest.raises(DatasetError, match=r"annotation id 1: unknown image id"):
        parse_instances(json.dumps(content).encode(), tmp_path / "e.json")

"""core.nnet.checkpoint: what differs between a snapshot's config and the run's, in the settings
that decide whether its weights load; a missing snapshot names what there is."""

from __future__ import annotations

import json

import pytest

from core.config import SystemConfig, load_config
from core.nnet.checkpoint import SnapshotMissing, config_difference, require_snapshot


def configs(model: str | None = "CornerNet_Tiny", categories: int = 4,
            snapshot_name: str = "Tiny") -> dict:
    return {"system": {"model": model, "snapshot_name": snapshot_name, "batch_size": 8},
            "db": {"categories": categories, "input_size": [127, 127]}}


def test_same_model_and_classes_differ_in_nothing_that_matters():
    other = configs()
    other["system"]["batch_size"], other["db"]["input_size"] = 2, [255, 255]
    assert config_difference(configs(), other) == []


def test_another_class_count_is_named_with_both_numbers():
    assert config_difference(configs(categories=80), configs(categories=4)) == [
        "db.categories: the snapshot was trained for 80 classes, this config has 4"]


def test_another_model_is_named_also_when_chosen_by_the_config_name():
    saved = configs(model=None, snapshot_name="CornerNet_Squeeze", categories=80)
    assert config_difference(saved, configs()) == [
        "model: the snapshot holds CornerNet_Squeeze, this config builds CornerNet_Tiny",
        "db.categories: the snapshot was trained for 80 classes, this config has 4"]


def test_settings_the_snapshot_does_not_record_are_not_compared():
    assert config_difference({"system": {}}, configs()) == []


def test_config_difference_reads_a_real_config_pair():
    system, db = load_config("CornerNet_Tiny")
    saved = json.loads(json.dumps({"system": system.full, "db": db}))
    saved["db"]["categories"] = 80
    expected = (f"db.categories: the snapshot was trained for 80 classes, this config has "
                f"{db['categories']}")
    assert config_difference(saved, {"system": system.full, "db": db}) == [expected]


def test_a_missing_snapshot_names_the_file_what_exists_and_what_to_do(tmp_path):
    system = SystemConfig().update_config({"snapshot_name": "T", "cache_dir": str(tmp_path)})
    with pytest.raises(SnapshotMissing, match=r"no snapshot for iteration 7: .*T_7\.pkl does not "
                                              r"exist \(available: none\); pick --iter"):
        require_snapshot(system, 7, "pick --iter")
    system.snapshot_dir.mkdir(parents=True)
    (system.snapshot_dir / "T_5.pkl").write_bytes(b"")
    with pytest.raises(SnapshotMissing, match=r"\(available: T_5\.pkl\)"):
        require_snapshot(system, 7)
    assert require_snapshot(system, 5) == system.snapshot_dir / "T_5.pkl"

"""core.engine.snapshots: the newest snapshot that loads, pruning, the best snapshot and its
history."""

from __future__ import annotations

import torch
from _tiny_nnet import factory, tiny_config

from core.engine.snapshots import Best, latest, numbered, prune, set_aside_later_best


def snapshot_config(tmp_path):
    return tiny_config(tmp_path)


def test_latest_passes_over_a_damaged_newest_snapshot(tmp_path, tiny_db):
    nnet = factory(tmp_path, tiny_db)
    for it in (2, 4, 6):
        nnet.save_params(it)
    nnet.system_config.snapshot_file(6).write_bytes(b"torn")
    said = []
    assert latest(nnet.system_config, said.append) == 4
    assert any("P_6.pkl" in line and "does not load" in line for line in said)


def test_a_hand_copied_snapshot_with_leading_zeros_is_passed_over_and_named(tmp_path, tiny_db):
    nnet = factory(tmp_path, tiny_db)
    for it in (2, 4):
        nnet.save_params(it)
    copy = nnet.system_config.snapshot_dir / "P_007.pkl"
    copy.write_bytes(nnet.system_config.snapshot_file(4).read_bytes())
    said = []
    assert latest(nnet.system_config, said.append) == 4
    assert list(numbered(nnet.system_config)) == [2, 4]
    assert said == [("P_007.pkl is not a snapshot name (leading zeros), passed over; rename it "
                    "P_7.pkl to resume from it")]


def test_latest_without_snapshots_starts_from_scratch_and_says_so(tmp_path):
    said = []
    assert latest(snapshot_config(tmp_path), said.append) == 0
    assert "starting from scratch" in said[0]


def test_pruning_keeps_the_newest_and_never_the_best_file(tmp_path, tiny_db):
    nnet = factory(tmp_path, tiny_db)
    for it in (1, 2, 3, 4):
        nnet.save_params(it)
    best = Best(nnet.system_config.snapshot_file("best"), None)
    best.update(1, 0.3, lambda path: nnet.save_params(1, {"best": best.record}, path=path))
    removed = prune(nnet.system_config, keep=2)
    assert [p.name for p in removed] == ["P_1.pkl", "P_2.pkl"]
    assert list(numbered(nnet.system_config)) == [3, 4]
    assert best.path.is_file()
    assert prune(nnet.system_config, keep=None) == []


def test_best_is_replaced_only_by_a_higher_ap():
    saved = []
    best = Best(path=None, record=None)
    assert best.update(5, 0.2, saved.append)
    assert not best.update(10, 0.1, saved.append)
    assert not best.update(15, 0.2, saved.append)
    assert best.update(20, 0.4, saved.append)
    assert best.record == {"iteration": 20, "AP": 0.4} and len(saved) == 2


def test_an_ap_of_minus_one_is_never_the_best():
    """COCO's -1 means nothing could be scored (an empty split): not a result to keep."""
    saved = []
    best = Best(path=None, record=None)
    assert not best.update(5, -1.0, saved.append)
    assert best.record is None and not saved


def test_a_best_snapshot_from_after_the_resumed_iteration_is_moved_aside(tmp_path, tiny_db):
    nnet = factory(tmp_path, tiny_db)
    path = nnet.system_config.snapshot_file("best")
    nnet.save_params(8, {"best": {"iteration": 8, "AP": 0.5}}, path=path)
    said = []
    set_aside_later_best(path, 10, said.append)
    assert path.is_file() and not said
    assert set_aside_later_best(path, 6, said.append) == path.with_name("P_best.aside1.pkl")
    assert not path.exists() and "P_best.pkl" in said[0] and "P_best.aside1.pkl" in said[0]
    assert torch.load(path.with_name("P_best.aside1.pkl"), weights_only=True)["best"] == \
        {"iteration": 8, "AP": 0.5}
    nnet.save_params(9, {"best": {"iteration": 9, "AP": 0.6}}, path=path)
    assert set_aside_later_best(path, 0, said.append).name == "P_best.aside2.pkl"

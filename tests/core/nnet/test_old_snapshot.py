"""Snapshots written before the network owned its state (main @ b09d064, where
`core.nnet.checkpoint.save` read the factory's attributes) still resume bit-exactly.

The old file is spelled out key by key in tests/_old_snapshot.py, as that commit wrote it, not
built with today's `state_dict`: a change of today's layout cannot hide a break with the old one.
"""

from __future__ import annotations

import pytest
import torch
from _old_snapshot import LOOP_STATE, SYSTEM, old_snapshot
from _tiny_nnet import batch_of, factory

from tests._dense_reference import coco128_db


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


@pytest.fixture(scope="module")
def batches(db):
    return [batch_of(db, 4, seed=seed) for seed in range(4)]


@pytest.mark.slow  # 3 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_an_old_layout_snapshot_resumes_bit_exactly(tmp_path, db, batches):
    straight = factory(tmp_path / "a", db, **SYSTEM)
    expected = [straight.train(batch) for batch in batches]

    first = factory(tmp_path / "b", db, **SYSTEM)
    for batch in batches[:2]:
        first.train(batch)
    path = first.system_config.snapshot_file(2)
    path.parent.mkdir(parents=True)
    torch.save(old_snapshot(first, 2), path)
    rng = torch.get_rng_state()
    torch.rand(100)  # the RNG moves on; the resume must put it back

    resumed = factory(tmp_path / "b", db, seed=7, **SYSTEM)
    snapshot = resumed.load_params(2)
    assert torch.equal(torch.get_rng_state(), rng)
    assert {k: snapshot[k] for k in LOOP_STATE} == LOOP_STATE  # what build.py reads back
    assert resumed.ema.steps == first.ema.steps == 2
    got = [resumed.train(batch) for batch in batches[2:]]
    for (loss, terms), (want, want_terms) in zip(got, expected[2:]):
        assert torch.equal(loss, want)
        assert terms.keys() == want_terms.keys()
        assert all(torch.equal(terms[k], want_terms[k]) for k in terms)
    for mine, theirs in ((resumed.model, straight.model),
                         (resumed.ema.module, straight.ema.module)):
        for key, value in theirs.state_dict().items():
            assert torch.equal(mine.state_dict()[key], value), key
    steps = [s["step"] for s in resumed.optimizer.state_dict()["state"].values()]
    assert steps and all(float(step) == 4 for step in steps)


def test_todays_snapshot_holds_every_key_of_the_old_layout(tmp_path, db):
    """Readable both ways: a snapshot written now loads where the old layout is expected; it
    adds only the class names and ids (which the old layout's readers pass over)."""
    nnet = factory(tmp_path, db, **SYSTEM)
    nnet.train(batch_of(db, 4))
    nnet.save_params(1, LOOP_STATE)
    new = torch.load(nnet.system_config.snapshot_file(1), weights_only=True)
    old = old_snapshot(nnet, 1)
    assert new.keys() == old.keys() | {"classes"}
    assert new["classes"]["names"][0] == "person" and new["classes"]["ids"][:2] == [1, 2]
    assert new["ema"].keys() == old["ema"].keys()
    assert new["config"] == old["config"]
    assert new["optimizer"]["param_groups"] == old["optimizer"]["param_groups"]

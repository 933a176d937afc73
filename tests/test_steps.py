"""core.engine.steps: the non-finite step policy ("stop", or "skip" until the run diverges)."""

from __future__ import annotations

import math

import pytest
import torch

from core.engine.steps import RECENT, TrainStep
from core.nnet.py_factory import NonFiniteLoss
from tests.test_precision import batch_of, factory


class Diverging:
    """A factory whose steps are non-finite from step `first_bad` on."""

    def __init__(self, first_bad):
        self.calls, self.first_bad = 0, first_bad

    def train(self, batch):
        self.calls += 1
        if self.calls >= self.first_bad:
            raise NonFiniteLoss({"focal": math.nan})
        return torch.tensor(1.0), {}


def test_skip_policy_counts_skips_and_stops_when_most_recent_steps_fail():
    said = []
    step = TrainStep(Diverging(first_bad=4), "skip", said.append)
    for it in range(1, 4):
        assert step(None, it) is not None
    skipped = 0
    with pytest.raises(NonFiniteLoss) as err:
        for it in range(4, 100):
            assert step(None, it) is None
            skipped += 1
    assert skipped == RECENT // 2  # the next skip made it more than half of the last RECENT
    assert err.value.iteration == 4 + RECENT // 2
    assert step.skipped == RECENT // 2 + 1


def test_stop_policy_raises_with_the_iteration():
    step = TrainStep(Diverging(first_bad=1), "stop", print)
    with pytest.raises(NonFiniteLoss) as err:
        step(None, 7)
    assert err.value.iteration == 7 and step.skipped == 0


@pytest.fixture(scope="module")
def db(coco128, tmp_path_factory):
    from tests._dense_reference import coco128_db
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


def test_a_step_the_fp16_scaler_skips_is_counted_as_skipped_and_leaves_the_weights(tmp_path,
                                                                                    db):
    # The CPU's gradient scaler behaves as the GPU's: a scale of 2**127 overflows the gradients,
    # the scaler skips optimizer.step() and halves its scale; at 2**8 the steps go through.
    nnet = factory(tmp_path, db)
    nnet.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=1000)
    step, said = TrainStep(nnet, "stop", lambda line: said.append(line)), []
    batch = batch_of(db, 2)
    before = [p.detach().clone() for p in nnet.model.parameters()]
    assert step(batch, 1) is None
    assert step.skipped == 1 and "fp16 gradients overflowed" in said[0]
    assert nnet.scaler.get_scale() == 2.0 ** 126
    assert all(torch.equal(a, b) for a, b in zip(before, nnet.model.parameters()))
    nnet.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=1000)
    nnet._scale = None
    assert step(batch, 2) is not None and step.skipped == 1
    assert not all(torch.equal(a, b) for a, b in zip(before, nnet.model.parameters()))

"""core.engine.steps: the non-finite step policy ("stop", or "skip" until the run diverges),
decided when the steps are read (`settle`), as if each step had been read at its iteration."""

from __future__ import annotations

import math

import pytest
import torch
from _tiny_nnet import batch_of, factory

from core.engine.steps import RECENT, TrainStep
from core.nnet.py_factory import NonFiniteLoss


class Diverging:
    """A factory whose losses are non-finite at the steps in `bad` (counted from 1)."""

    def __init__(self, bad):
        self.calls, self.bad = 0, bad

    def train(self, batch):
        self.calls += 1
        value = math.nan if self.calls in self.bad else 1.0
        return torch.tensor(value), {"focal": torch.tensor(value), "pull": torch.tensor(0.5)}


def test_skip_policy_counts_skips_and_stops_when_most_recent_steps_fail():
    said = []
    step = TrainStep(Diverging(bad=range(4, 1000)), "skip", said.append)
    for it in range(1, 100):
        _loss, _ = step(None, it)  # never read here: the steps only queue
    with pytest.raises(NonFiniteLoss) as err:
        step.settle(99)
    # the same iteration as when every step was read at once: the 11th skip in a row is more
    # than half of the last RECENT
    assert err.value.iteration == 4 + RECENT // 2 and err.value.read_at == 99
    assert err.value.skipped == (RECENT // 2 + 1, 3 + RECENT // 2 + 1)  # 3 good steps before
    assert step.skipped == RECENT // 2 + 1
    assert said == [(f"iterations 4-{4 + RECENT // 2} ({RECENT // 2 + 1} steps): non-finite loss "
                    f"(focal=nan, pull=0.5); step skipped on the device "
                    f"({RECENT // 2 + 1} so far)")]
    assert "diverging" in err.value.explain()


def test_skip_policy_says_each_run_of_skipped_steps_and_shows_nothing_for_a_skipped_one():
    said = []
    step = TrainStep(Diverging(bad={2, 5, 6}), "skip", said.append, skipped=4)
    for it in range(1, 8):
        step(None, it)
    assert step.settle(6) is False  # iteration 6 was skipped: no display line for it
    assert step.settle(7) is True and step.settle(1) is True
    assert said == [("iteration 2: non-finite loss (focal=nan, pull=0.5); step skipped on the "
                    "device (5 so far)"),
                    ("iterations 5-6 (2 steps): non-finite loss (focal=nan, pull=0.5); step "
                    "skipped on the device (7 so far)")]
    assert step.state_dict() == {"skipped_steps": 7}


def test_stop_policy_raises_at_the_next_read_naming_the_first_bad_iteration():
    step = TrainStep(Diverging(bad={7, 8}), "stop", print)
    for it in range(1, 10):
        step(None, it)
    with pytest.raises(NonFiniteLoss) as err:
        step.settle(10)
    assert err.value.iteration == 7 and step.skipped == 0
    assert err.value.explain().startswith(
        "iteration 7: the loss is not finite (focal=nan, pull=0.5) (found when read at iteration "
        "10); stopping.")


def test_a_step_that_reads_at_once_stops_at_the_bad_step_itself():
    """The CPU's step (no fused optimizer) reads each loss anyway: "stop" ends the run at the
    bad iteration, as it always did there, not at the next display."""
    nnet = Diverging(bad={7, 8})
    nnet.reads_at_once = True
    step = TrainStep(nnet, "stop", print)
    for it in range(1, 7):
        step(None, it)
    with pytest.raises(NonFiniteLoss) as err:
        step(None, 7)
    assert err.value.iteration == 7 and err.value.read_at == 7 and nnet.calls == 7
    assert err.value.explain().startswith(
        "iteration 7: the loss is not finite (focal=nan, pull=0.5); stopping.")


def test_a_read_with_nothing_new_reads_nothing():
    step = TrainStep(Diverging(bad=set()), "stop", print)
    step(None, 1)
    assert step.settle(1) is True
    step.nnet = None  # a second read would touch the network
    assert step.settle(1) is True


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
    step(batch, 1)
    assert nnet.scaler_skipped.dtype == torch.bool and nnet.scaler_skipped.device.type == "cpu"
    assert step.settle(1) is False
    assert step.skipped == 1 and "fp16 gradients overflowed" in said[0]
    assert "(now 8.50706e+37; 1 skipped so far)" in said[0]
    assert nnet.scaler.get_scale() == 2.0 ** 126
    assert all(torch.equal(a, b) for a, b in zip(before, nnet.model.parameters()))
    nnet.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=1000)
    step(batch, 2)
    assert step.settle(2) is True and step.skipped == 1
    assert not all(torch.equal(a, b) for a, b in zip(before, nnet.model.parameters()))

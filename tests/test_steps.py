"""core.engine.steps: the non-finite step policy ("stop", or "skip" until the run diverges)."""

from __future__ import annotations

import math

import pytest
import torch

from core.engine.steps import RECENT, TrainStep
from core.nnet.py_factory import NonFiniteLoss


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

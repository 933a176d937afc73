"""core.engine.schedule: the learning rate of an iteration and which periodic actions are due."""

from __future__ import annotations

import pytest

from core.config import SystemConfig
from core.engine.schedule import due, learning_rate_at


def schedule(**system):
    return SystemConfig().update_config({"learning_rate": 0.01, "decay_rate": 10,
                                         "stepsize": 100, **system})


def test_warmup_rises_linearly_from_the_factor_then_follows_the_steps():
    config = schedule(warmup_iters=4, warmup_factor=0.2)
    rates = [learning_rate_at(i, config) for i in (1, 2, 3, 4, 5, 100, 101)]
    expected = [0.01 * 0.2, 0.01 * 0.4, 0.01 * 0.6, 0.01 * 0.8, 0.01, 0.01, 0.001]
    assert rates == pytest.approx(expected, rel=1e-12)


def test_without_warmup_the_rate_is_the_originals_step_decay():
    config = schedule()
    assert [learning_rate_at(i, config) for i in (1, 100, 101, 201)] == \
        pytest.approx([0.01, 0.01, 0.001, 0.0001], rel=1e-12)


def test_warmup_crossing_a_decay_step_multiplies_both():
    config = schedule(stepsize=2, warmup_iters=4, warmup_factor=0.5)
    assert learning_rate_at(3, config) == pytest.approx(0.001 * (0.5 + 0.5 * 2 / 4), rel=1e-12)


def test_due_every_period_and_never_for_zero():
    assert [it for it in range(1, 11) if due(it, 3)] == [3, 6, 9]
    assert not any(due(it, 0) for it in range(1, 5))


def test_due_at_the_last_iteration_when_it_is_given():
    assert [it for it in range(1, 11) if due(it, 4, last=10)] == [4, 8, 10]
    assert not any(due(it, 0, last=10) for it in range(1, 11))  # 0 stays "never"


@pytest.mark.parametrize("decay_rate", [10, 10.0])
def test_a_decay_power_beyond_a_float_is_a_rate_of_zero_not_an_overflow(decay_rate):
    config = schedule(decay_rate=decay_rate, stepsize=1, max_iter=2 ** 63 - 1)
    assert learning_rate_at(308, config) == pytest.approx(0.01 / 10.0 ** 307, rel=1e-12)
    assert learning_rate_at(400, config) == 0.0  # 10 ** 399: beyond a float
    assert learning_rate_at(2 ** 63 - 1, config) == 0.0  # at once, not a huge power

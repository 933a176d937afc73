"""The learning rate as a pure function of the iteration: linear warm-up into step decay.

Being a function of the iteration alone (no scheduler state), it needs nothing in a snapshot
and a resumed run gets exactly the rates of an uninterrupted one.
"""

from __future__ import annotations

from typing import Any


def learning_rate_at(iteration: int, system_config: Any) -> float:
    """The learning rate of iteration `iteration` (1-based).

    Step decay as the original: `learning_rate / decay_rate ** ((i - 1) // stepsize)`. During the
    first `warmup_iters` iterations it is multiplied by a factor rising linearly from
    `warmup_factor` at iteration 1 towards 1: `f + (1 - f) * (i - 1) / warmup_iters`; from
    iteration `warmup_iters + 1` on the factor is 1.
    """
    steps = (iteration - 1) // system_config.stepsize
    rate = system_config.learning_rate / system_config.decay_rate ** steps
    warmup = system_config.warmup_iters
    if iteration <= warmup:
        factor = system_config.warmup_factor
        rate *= factor + (1 - factor) * (iteration - 1) / warmup
    return rate

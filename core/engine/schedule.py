"""What happens at an iteration: the learning rate, and which periodic actions are due.

Both are pure functions of the iteration: no scheduler state, nothing in a snapshot, and a
resumed run gets exactly the rates and the actions of an uninterrupted one.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import SystemConfig


def learning_rate_at(iteration: int, system_config: SystemConfig) -> float:
    """The learning rate of iteration `iteration` (1-based).

    Step decay as the original: `learning_rate / decay_rate ** ((i - 1) // stepsize)`. During the
    first `warmup_iters` iterations it is multiplied by a factor rising linearly from
    `warmup_factor` at iteration 1 towards 1: `f + (1 - f) * (i - 1) / warmup_iters`; from
    iteration `warmup_iters + 1` on the factor is 1. Once `decay_rate ** steps` is beyond a
    float (the rate below any float), the rate is 0: never an overflow, never a power of
    millions of digits computed.
    """
    steps = (iteration - 1) // system_config.stepsize
    decay = system_config.decay_rate
    if decay > 1 and steps * math.log(decay) > math.log(sys.float_info.max):
        return 0.0
    rate = system_config.learning_rate / decay ** steps
    warmup = system_config.warmup_iters
    if iteration <= warmup:
        factor = system_config.warmup_factor
        rate *= factor + (1 - factor) * (iteration - 1) / warmup
    return rate


def due(iteration: int, every: int, last: int | None = None) -> bool:
    """Whether a periodic action runs at `iteration`: every `every` iterations (0: never), and
    at `last` when given (snapshots and evaluations also run at the last iteration)."""
    return bool(every) and (iteration % every == 0 or iteration == last)

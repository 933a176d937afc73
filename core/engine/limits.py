"""Stopping rules: a run stops itself when validation AP has stopped improving, or before a
wall-clock deadline.

`system.patience: N` stops after an evaluation when the last N evaluations did not beat the best
AP. The count is derived from the best-AP record (its iteration) and `system.eval_iter`, both
kept in every snapshot, so a resumed run stops where an uninterrupted one would.

`system.max_minutes: M` stops with a snapshot when the next iteration would end after M minutes
from the start of this process's training: the next iteration is predicted to take as long as
the longest of the last few of its kind (with or without an evaluation). The run is not
finished; it exits with RESUME_STATUS and continues with `--iter latest`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from .stop import RESUME_STATUS

_RECENT = 5  # iterations of each kind the prediction looks back over


class Limits:
    """Checked by the loop at the end of each iteration."""

    def __init__(self, patience: int | None, eval_iter: int, max_minutes: float | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.patience, self.eval_iter, self.max_minutes = patience, eval_iter, max_minutes
        self._clock = clock
        self._last = clock()
        self.deadline = None if max_minutes is None else self._last + 60.0 * max_minutes
        self._took = {False: deque(maxlen=_RECENT), True: deque(maxlen=_RECENT)}

    def evaluations_without_gain(self, iteration: int, best: dict | None) -> int:
        """Evaluations after the best one up to `iteration` (all of them without a best)."""
        since = 0 if best is None else best["iteration"]
        return iteration // self.eval_iter - since // self.eval_iter

    def patience_spent(self, iteration: int, evaluated: bool, best: dict | None) -> bool:
        return bool(self.patience and evaluated
                    and self.evaluations_without_gain(iteration, best) >= self.patience)

    def deadline_near(self, evaluated: bool, next_evaluates: bool) -> bool:
        """Record the iteration that just ended; True when the next one would end past the
        deadline."""
        now = self._clock()
        self._took[evaluated].append(now - self._last)
        self._last = now
        if self.deadline is None:
            return False
        recent = self._took[next_evaluates] or self._took[False]
        return now + max(recent) > self.deadline

    def reason(self, iteration: int, patience: bool, best: dict | None) -> tuple[str, int]:
        """The line to print and the exit status of a stop by one of the rules."""
        if patience:
            held = (f"the best, AP {best['AP']:.4f}, at iteration {best['iteration']}" if best
                    else "no AP could be scored")
            line = (f"stopped early after iteration {iteration}: validation AP did not improve "
                    f"for {self.patience} evaluations (system.patience); {held}")
            return line, 0
        line = (f"stopped at the deadline after iteration {iteration}: the next iteration would "
                f"end past system.max_minutes={self.max_minutes:g}; continue with --iter latest")
        return line, RESUME_STATUS

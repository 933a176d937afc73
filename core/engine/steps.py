"""One training step under the non-finite-loss policy of `system.nonfinite_loss`."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Callable

from ..nnet.py_factory import NonFiniteLoss

if TYPE_CHECKING:
    from ..data.prefetch import Prefetcher
    from ..nnet.py_factory import NetworkFactory

# "skip" gives up when more than half of the last RECENT steps were skipped: the run is
# diverging, not meeting the odd bad batch.
RECENT = 20


class TrainStep:
    """`step(batch, iteration)` -> (loss, terms), or None for a skipped step (a non-finite loss,
    or fp16 gradients that overflowed, which the gradient scaler skips).

    With policy "stop" a non-finite loss raises NonFiniteLoss carrying the iteration; with "skip"
    the step is skipped, said and counted, and NonFiniteLoss is raised once more than half of
    the last RECENT steps were skipped. Its state is {"skipped_steps": skipped so far}.
    """

    def __init__(self, nnet: NetworkFactory, policy: str, log: Callable[[str], None],
                 skipped: int = 0) -> None:
        self.nnet, self.policy, self.log = nnet, policy, log
        self.skipped = skipped  # so far, the resumed run's included
        self._recent: collections.deque[bool] = collections.deque(maxlen=RECENT)

    def state_dict(self) -> dict[str, int]:
        return {"skipped_steps": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        """The resumed run's count; the window of recent steps starts empty, as before."""
        self.skipped = int(state.get("skipped_steps", 0))

    def __call__(self, batch: dict, iteration: int) -> tuple | None:
        try:
            result = self.nnet.train(batch)
        except NonFiniteLoss as err:
            err.iteration = iteration
            if self.policy == "stop":
                raise
            self.skipped += 1
            self._recent.append(True)
            self.log(f"iteration {iteration}: non-finite loss ({err}); step skipped "
                     f"({self.skipped} so far)")
            if sum(self._recent) > RECENT // 2:
                err.skipped = (sum(self._recent), len(self._recent))
                raise
            return None
        self._recent.append(False)
        if getattr(self.nnet, "scaler_skipped", False):
            # fp16's scaler met overflowing gradients and skipped the update: counted as a
            # skipped step, never as divergence (it happens at the start, while it finds its
            # scale).
            self.skipped += 1
            self.log(f"iteration {iteration}: fp16 gradients overflowed, the gradient scaler "
                     f"skipped the step and lowered its scale to "
                     f"{self.nnet.scaler.get_scale():g} ({self.skipped} skipped so far)")
            return None
        return result


def validate(nnet: NetworkFactory, data: Prefetcher, should_stop: Callable[[], bool]) -> float:
    """The loss of the next validation batch, with the network in eval mode meanwhile."""
    nnet.eval_mode()
    try:
        batch, _ = data.get(should_stop)
        loss, _ = nnet.validate(batch)
    finally:
        nnet.train_mode()
    return float(loss)

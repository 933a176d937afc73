"""One training step under the non-finite-loss policy of `system.nonfinite_loss`; validation.

On a GPU the step never waits for the host: a non-finite loss skips its update on the device
(`NetworkFactory.train`), and what each step's loss was is read only when the loop reads anyway
(a display, a validation, an evaluation, a snapshot, the end): `TrainStep.settle` then reads every
step since the last read at once, says the skipped ones by their iterations, counts them, and
applies the policy, as if each had been read at its own iteration.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ..nnet.py_factory import NonFiniteLoss

if TYPE_CHECKING:
    from ..data.prefetch import Prefetcher
    from ..nnet.py_factory import NetworkFactory

# "skip" gives up when more than half of the last RECENT steps were skipped: the run is
# diverging, not meeting the odd bad batch.
RECENT = 20


class TrainStep:
    """`step(batch, iteration)` -> (loss, terms) on the device, read by nobody yet;
    `settle(iteration)` reads the steps up to `iteration` and says whether its step was applied
    (False: skipped, for a non-finite loss or fp16 gradients that overflowed).

    With policy "stop" a non-finite loss raises NonFiniteLoss at the next `settle`, naming the
    first such iteration; with "skip" the steps are skipped, said and counted, and NonFiniteLoss
    is raised once more than half of the last RECENT steps were skipped. fp16 steps whose
    gradients overflowed are skipped by the gradient scaler, counted, never divergence. Its
    state is {"skipped_steps": skipped so far}.
    """

    def __init__(self, nnet: NetworkFactory, policy: str, log: Callable[[str], None],
                 skipped: int = 0) -> None:
        self.nnet, self.policy, self.log = nnet, policy, log
        self.skipped = skipped  # so far, the resumed run's included
        self._recent: collections.deque[bool] = collections.deque(maxlen=RECENT)
        # (iteration, loss, terms, fp16 overflow or None) of the steps not read yet
        self._pending: list[tuple] = []
        self._applied: dict[int, bool] = {}  # of the steps read at the last settle

    def state_dict(self) -> dict[str, int]:
        return {"skipped_steps": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        """The resumed run's count; the window of recent steps starts empty, as before."""
        self.skipped = int(state.get("skipped_steps", 0))

    def __call__(self, batch: dict, iteration: int) -> tuple:
        loss, terms = self.nnet.train(batch)
        overflow = getattr(self.nnet, "scaler_skipped", False)  # a device bool with fp16
        self._pending.append((iteration, loss, terms,
                              overflow if isinstance(overflow, torch.Tensor) else None))
        if getattr(self.nnet, "reads_at_once", False):
            # The CPU's step reads its loss anyway (nothing is queued to wait for): the policy
            # acts at the bad step itself, as it always did there.
            self.settle(iteration)
        return loss, terms

    def settle(self, iteration: int) -> bool:
        """Read the steps not read yet (one host read), say and count the skipped ones, apply
        the policy; whether the step of `iteration` was applied."""
        if self._pending:
            pending, self._pending = self._pending, []
            try:
                self._applied = self._read(pending)
            except NonFiniteLoss as err:
                err.read_at = iteration
                raise
        return self._applied.get(iteration, True)

    def _read(self, pending: list[tuple]) -> dict[int, bool]:
        overflows = [o if o is not None else torch.zeros((), dtype=torch.bool, device=loss.device)
                     for _, loss, _, o in pending]
        rows = torch.stack([torch.stack([loss.float(), *map(torch.Tensor.float, terms.values()),
                                         overflow.float()])
                            for (_, loss, terms, _), overflow in zip(pending, overflows)]).tolist()
        applied, bad_run = {}, []
        for (iteration, _, terms, _), row in zip(pending, rows):
            if not math.isfinite(row[0]):
                err = NonFiniteLoss(dict(zip(terms, row[1:-1])))
                err.iteration = iteration
                if self.policy == "stop":
                    raise err
                self.skipped += 1
                self._recent.append(True)
                bad_run.append((iteration, err))
                if sum(self._recent) > RECENT // 2:
                    self._say(bad_run)
                    err.skipped = (sum(self._recent), len(self._recent))
                    raise err
                applied[iteration] = False
                continue
            self._say(bad_run)
            bad_run = []
            self._recent.append(False)
            applied[iteration] = not row[-1]
            if row[-1]:
                # fp16's scaler met overflowing gradients and skipped the update: counted as a
                # skipped step, never as divergence (it happens at the start, while it finds
                # its scale).
                self.skipped += 1
                self.log(f"iteration {iteration}: fp16 gradients overflowed, the gradient "
                         f"scaler skipped the step and lowered its scale (now "
                         f"{self.nnet.scaler.get_scale():g}; {self.skipped} skipped so far)")
        self._say(bad_run)
        return applied

    def _say(self, bad_run: list[tuple[int, NonFiniteLoss]]) -> None:
        """One line for consecutive steps skipped for a non-finite loss."""
        if not bad_run:
            return
        (first, err), last = bad_run[0], bad_run[-1][0]
        where = f"iteration {first}" if first == last else \
            f"iterations {first}-{last} ({len(bad_run)} steps)"
        self.log(f"{where}: non-finite loss ({err}); step skipped on the device "
                 f"({self.skipped} so far)")


def validate(nnet: NetworkFactory, data: Prefetcher, should_stop: Callable[[], bool]) -> float:
    """The loss of the next validation batch, with the network in eval mode meanwhile."""
    nnet.eval_mode()
    try:
        batch, _ = data.get(should_stop)
        loss, _ = nnet.validate(batch)
    finally:
        nnet.train_mode()
    return float(loss)

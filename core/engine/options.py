"""Training's options, declared once: `cornernet train`'s command line is built from
`TrainOptions`, `cornernet.train(...)` builds it with keywords, and every rank is started with
the same frozen value (it is pickled into spawned ranks).

What launch settles (the device, the rendezvous, SLURM's placement) is a new value made with
`dataclasses.replace`, never a change of the one a rank already holds. Counts that cannot be
right (`--workers 0`) are refused by `preflight.check_args` before anything starts, in the one
line every start-up mistake gets.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..config.options import ConfigOptions, DataOptions, DeviceOptions
from ..errors import UsageError
from ..utils.options import option

STOP_SIGNALS = ("USR1", "USR2", "TERM", "HUP")


def iteration_arg(text: str) -> str:
    """--iter: a snapshot iteration (>= 0) or 'latest'."""
    if text != "latest" and not text.isdigit():
        raise ValueError(f"expected an iteration number or 'latest', got {text!r}")
    return text


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainOptions(DataOptions, DeviceOptions, ConfigOptions):  # help: config first
    """`cornernet train`'s options. `data`, `name` and `no_fit` are resolved by the command into
    the run's config (cornernet/commands/train.py `data_run`) before launch, which is then
    given the run's name."""

    start_iter: str = option("0", "--iter", parse=iteration_arg,
                             help="continue from the snapshot of this iteration; 'latest': from "
                                  "the newest snapshot that loads (from scratch when there is "
                                  "none)")
    workers: int = option(4, "--workers", parse=int, help="prefetch processes per rank")
    initialize: bool = option(False, "--initialize",
                              help="write the iteration-0 snapshot and exit")
    distributed: bool = option(False, "--distributed")
    world_size: int = option(-1, "--world-size", parse=int,
                             help="number of nodes of distributed training")
    rank: int = option(0, "--rank", parse=int, help="node rank")
    dist_url: str | None = option(None, "--dist-url",
                                  help="rendezvous, e.g. tcp://host:port (default: a local port)")
    dist_backend: str | None = option(None, "--dist-backend",
                                      help="nccl with GPUs, gloo without (the default follows "
                                           "the machine)")
    procs_per_node: int | None = option(None, "--procs-per-node", parse=int,
                                        help="training processes per node (default: one per "
                                             "GPU, or 1 without GPUs)")
    dry_run: int | None = option(None, "--dry-run", parse=int, metavar="N",
                                 help="only take N batches through the data path, print its "
                                      "figures (images/s, bytes per image, reading/augmenting/"
                                      "queueing) and exit")
    device: str | None = option(None, "--device",
                                help="cuda, cuda:1 or cpu (default: the current GPU, else cpu); "
                                     "under --distributed only cuda or cpu: rank r takes "
                                     "cuda:<local rank r>")
    stop_signal: str | None = option(None, "--stop-signal", choices=STOP_SIGNALS,
                                     help="the signal that means: snapshot, exit 75, resume me "
                                          "later (default: system.stop_signal, USR1)")
    requeue: bool = option(False, "--requeue",
                           help="after that signal, requeue the SLURM job (system.requeue)")
    weights: str | None = option(None, "--weights", metavar="FILE",
                                 help="start from these weights (a snapshot of this project, a "
                                      "<Cfg>_best.pkl or an official CornerNet-Lite file), also "
                                      "of another class count: tensors of the same name and "
                                      "shape load, the rest start fresh; a tenth of the config's "
                                      "learning rate and a short warm-up unless --set gives them")

    def __post_init__(self) -> None:
        super().__post_init__()
        # The API may give an iteration as a number and files as paths or texts: one form each.
        start = str(self.start_iter)
        try:
            iteration_arg(start)
        except ValueError as err:
            raise UsageError(f"--iter: {err}") from None
        object.__setattr__(self, "start_iter", start)
        if self.data is not None:
            object.__setattr__(self, "data", Path(self.data))
        if self.weights is not None:
            object.__setattr__(self, "weights", str(self.weights))

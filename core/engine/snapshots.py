"""Which snapshots a run writes, resumes from, keeps and calls best.

Snapshots are `cache/nnet/<Cfg>/<Cfg>_<iter>.pkl`; the best one by validation AP is a copy,
`<Cfg>_best.pkl`, that records its iteration and AP and that pruning never touches.
"""

from __future__ import annotations

import glob
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from ..nnet.checkpoint import numbered
from ..utils import hints
from ..utils.dist import check_ranks_agree
from ..utils.files import move_aside
from .schedule import due

if TYPE_CHECKING:
    from ..config import SystemConfig
    from ..nnet.py_factory import NetworkFactory


class Checkpointable(Protocol):
    """A stateful part of a run: what `state_dict` returns, `load_state_dict` restores."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def latest(system_config: SystemConfig, log: Callable[[str], None]) -> int:
    """The iteration of the newest snapshot that loads; 0 (said) when there is none.

    A damaged newer snapshot (a crash mid-copy, a full disk) is named and passed over, and so
    is a file named like a snapshot with leading zeros (a hand copy).
    """
    found = numbered(system_config)
    folder, name = system_config.snapshot_dir, system_config.snapshot_name
    for path in sorted(folder.glob(f"{glob.escape(name)}_0*.pkl")) if folder.is_dir() else []:
        if path not in found.values() and path.stem[len(name) + 1:].isdigit():
            log(f"{path.name} is not a snapshot name (leading zeros), passed over; rename it "
                f"{name}_{int(path.stem[len(name) + 1:])}.pkl to resume from it")
    for iteration, path in reversed(found.items()):
        try:
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # reads no weights
        except Exception as err:  # noqa: BLE001 - any unreadable snapshot is skipped alike
            log(f"snapshot {path} does not load ({type(err).__name__}); trying an older one")
            continue
        return iteration
    log(f"--iter latest: no snapshot in {system_config.snapshot_dir}; starting from scratch")
    return 0


def prune(system_config: SystemConfig, keep: int | None) -> list[Path]:
    """Delete all but the `keep` newest numbered snapshots (None keeps all); returns the
    deleted paths. The best snapshot is a separate file and is never deleted.

    With system.snapshot_minutes, the snapshots between periods (by the clock or a stop) do not
    count against `keep`: only the newest of them is kept, and only while it is the newest
    snapshot, so rolling snapshots never push the periodic ones out.
    """
    if keep is None:
        return []
    found = numbered(system_config)
    if system_config.snapshot_minutes is None:
        paths = list(found.values())
        doomed = paths[:-keep] if len(paths) > keep else []
    else:
        periodic = [it for it in found if it % system_config.snapshot == 0]
        newest = max(found, default=0)
        doomed = [found[it] for it in found if it in periodic[:-keep]
                  or (it not in periodic and it != newest)]
    for path in doomed:
        path.unlink(missing_ok=True)
    return doomed


class Best:
    """The best validation AP so far and its snapshot file.

    Args:
        path: `<Cfg>_best.pkl`.
        record: {"iteration", "AP"} of the best so far (from the snapshot being resumed), or None.
    """

    def __init__(self, path: Path, record: dict | None = None) -> None:
        self.path = path
        self.record = record

    def state_dict(self) -> dict:
        """{"record": the record or None}."""
        return {"record": None if self.record is None else dict(self.record)}

    def load_state_dict(self, state: dict) -> None:
        record = state.get("record")
        self.record = None if record is None else {"iteration": int(record["iteration"]),
                                                   "AP": float(record["AP"])}

    def update(self, iteration: int, ap: float, save: Callable[[Path], None]) -> bool:
        """If `ap` beats the best so far, record it and `save(path)` (atomic); True if it did.
        A negative AP (COCO's -1: nothing could be scored) is never a best."""
        if ap < 0 or (self.record is not None and ap <= self.record["AP"]):
            return False
        self.record = {"iteration": iteration, "AP": float(ap)}
        save(self.path)
        return True

    def values(self) -> dict[str, float | int]:
        """{"best_AP", "best_iteration"} for the metrics writers, or {} before any best."""
        if self.record is None:
            return {}
        return {"best_AP": self.record["AP"], "best_iteration": self.record["iteration"]}


class Saver:
    """The loop's snapshots: numbered ones every `system.snapshot` iterations and at the end
    (pruned to `system.keep_snapshots`), and the best one after an evaluation that improves AP.
    A snapshot holds the network's `state_dict` and the loop's (`loop.state_dict()`).

    Args:
        nnet: the NetworkFactory.
        loop: the rest of the run's state (the engine's `Run`).
        best: the best-AP record, which `evaluated` keeps.
        system_config: the run's config.
        rank, distributed: only rank 0 writes; under DDP the ranks' weights are checked first.
        log: rank 0's log.
        scored: what each AP line adds about the images it was scored on ("": nothing; see
            `scored_note`).
    """

    def __init__(self, nnet: NetworkFactory, loop: Checkpointable, best: Best,
                 system_config: SystemConfig, rank: int, distributed: bool,
                 log: Callable[[str], None], scored: str = "") -> None:
        self.nnet, self.loop, self.best = nnet, loop, best
        self.system_config = system_config
        self.rank, self.distributed, self.log = rank, distributed, log
        self.scored = scored

    def due(self, iteration: int) -> bool:
        return due(iteration, self.system_config.snapshot, self.system_config.max_iter)

    def write(self, iteration: int, path: Path | None = None) -> Path:
        """Write snapshot `iteration` (to its numbered file, or `path`), whatever the rank."""
        return self.nnet.save_params(iteration, self.loop.state_dict(), path=path)

    def save(self, iteration: int) -> None:
        if self.distributed:
            check_ranks_agree(self.nnet.model, self.log)
        if self.rank == 0:
            self.write(iteration)
            for path in prune(self.system_config, self.system_config.keep_snapshots):
                self.log(f"removed old snapshot {path.name} (system.keep_snapshots "
                         f"{self.system_config.keep_snapshots})")

    def evaluated(self, iteration: int, ap: float) -> None:
        """Record the AP of `iteration`; a new best replaces `<Cfg>_best.pkl` atomically."""
        best, before = self.best, self.best.record
        line = f"iteration {iteration}: AP {ap:.4f}{self.scored}"
        if best.update(iteration, ap, lambda path: self.write(iteration, path)):
            self.log(f"{line}, the best so far: {best.path.name}")
        elif before is None:
            self.log(f"{line}: nothing could be scored, not a best")
        else:
            self.log(f"{line} (best {before['AP']:.4f} at iteration {before['iteration']})")


def scored_note(shared: int) -> str:
    """What an AP line adds when `shared` validation images are training images too."""
    return (f" (scored on training images: {shared} are in both splits)" if shared else "")


def set_aside_later_best(path: Path, start: int, log: Callable[[str], None]) -> Path | None:
    """Move aside a best snapshot written after iteration `start` (by a run that went on past the
    snapshot being resumed, or by an earlier run when this one starts from scratch): its weights
    belong to a history this run does not have, so they must not compete with this run's AP, but
    they are trained weights and may be the only ones left. One that cannot be read is moved
    aside too. Returns the new path (`<Cfg>_best.aside<k>.pkl`, k the first free number)."""
    if not path.is_file():
        return None
    try:
        record = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("best")
    except Exception:  # noqa: BLE001 - a damaged best snapshot cannot be this run's either
        record = None
    if record is not None and record["iteration"] <= start:
        return None
    aside = move_aside(path)
    what = (f"iteration {record['iteration']}, AP {record['AP']:.4f}" if record is not None
            else "unreadable")
    test = hints.command("test", f"{path.stem.rsplit('_', 1)[0]} --testiter "
                                 f"{aside.stem.split('_')[-1]}")
    log(f"moved {path.name} ({what}) aside to {aside.name}: it is not the best of this run's "
        f"history up to iteration {start}; nothing was deleted ({test} evaluates it)")
    return aside

"""Ranks that agree: every rank proves at start that it runs the same resolved config, and the
loop's per-iteration questions (stop? snapshot?) get one answer on every rank (`agree_all`).

Two nodes started with configs that differ in one value (a `max_iter`, a learning rate) train
apart: one waits in a collective the other never enters, or their weights drift until the
first snapshot's check. So before anything is built, every rank hashes its resolved config and
the arguments that shape the run, the hashes are gathered, and a difference is one line on
every rank naming the ranks and the keys that differ.

Paths are left out: nodes may mount the same data at different places.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from ..config.db_keys import path_keys
from ..errors import ConfigError

# The system folders; the db paths are those the datasets declare (core/config/db_keys.py).
NODE_LOCAL = {"system.data_dir", "system.cache_dir", "system.result_dir"}
ARGS = ("start_iter", "initialize", "dry_run")  # the command-line values every rank must share
SHOWN = 4  # differing keys named in the message; the rest are counted


def resolved(system: dict, db: dict, args: Any) -> dict[str, Any]:
    """`section.key` -> JSON-normal value of every key that must agree across ranks."""
    flat = {f"system.{k}": v for k, v in system.items()}
    flat.update({f"db.{k}": v for k, v in db.items()})
    flat.update({f"--{name.replace('_', '-')}": getattr(args, name, None) for name in ARGS})
    local = NODE_LOCAL | path_keys()
    flat = {k: v for k, v in flat.items() if k not in local}
    return json.loads(json.dumps(flat, sort_keys=True, default=str))


def digest(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]


def differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The keys whose values differ (present in one only counts), sorted."""
    return sorted(k for k in mine.keys() | theirs.keys() if mine.get(k, "<unset>") !=
                  theirs.get(k, "<unset>"))


def check_same_config(system: dict, db: dict, args: Any, rank: int, world: int) -> str:
    """Gather every rank's config; raise ConfigError (on every rank) if any differs from rank
    0's. Returns the shared hash."""
    mine = resolved(system, db, args)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (digest(mine), mine))
    reference_hash, reference = gathered[0]
    for other, (other_hash, values) in enumerate(gathered):
        if other_hash == reference_hash:
            continue
        keys = differences(reference, values)
        shown = ", ".join(f"{k} {json.dumps(values.get(k, '<unset>'))} on rank {other}, "
                          f"{json.dumps(reference.get(k, '<unset>'))} on rank 0"
                          for k in keys[:SHOWN])
        more = f" and {len(keys) - SHOWN} more keys" if len(keys) > SHOWN else ""
        raise ConfigError(f"rank {other} runs another config than rank 0 (hash {other_hash} "
                          f"vs {reference_hash}): {shown}{more}; start every node with the "
                          f"same configs file and --iter")
    return reference_hash


def agree_all(flags: Sequence[bool], distributed: bool, device: torch.device) -> list[bool]:
    """Each flag true on every rank when it is true on any, in one all-reduce: ranks must stop
    and snapshot at the same iteration."""
    if not distributed:
        return list(flags)
    value = torch.tensor([int(flag) for flag in flags], device=device)  # nccl: CUDA tensors only
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return [bool(v) for v in value.tolist()]

"""The snapshot format: what a snapshot holds, writing it atomically, and loading it back.

A snapshot (`cache/nnet/<Cfg>/<Cfg>_<iter>.pkl`) holds everything a run needs to continue
exactly: model, optimizer, gradient scaler (fp16), RNG states, the resolved config and the
training state the loop passes in (data position, best AP, counters). It loads with
`weights_only=True`, so a snapshot cannot run code. An official CornerNet-Lite snapshot (a plain
state dict with `module.` keys) loads as weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import ConfigError
from ..models import load_original_state_dict, strip_module_prefix
from ..utils.files import write_atomic

if TYPE_CHECKING:
    from ..config import SystemConfig
    from .py_factory import NetworkFactory

SNAPSHOT_FORMAT = "cornernet-lite-modern/1"


class SnapshotMissing(FileNotFoundError):
    """No snapshot file for the asked iteration; the message lists the ones there are."""


def require_snapshot(system_config: SystemConfig, iteration: int | str,
                     hint: str = "train first or pick another iteration") -> Path:
    """The file of snapshot `iteration`, or SnapshotMissing naming it, what exists and `hint`."""
    path = system_config.snapshot_file(iteration)
    if path.is_file():
        return path
    folder = system_config.snapshot_dir
    have = sorted(p.name for p in folder.glob("*.pkl")) if folder.is_dir() else []
    raise SnapshotMissing(f"no snapshot for iteration {iteration}: {path} does not exist "
                          f"(available: {', '.join(have) or 'none'}); {hint}")


def read_snapshot(path: Path) -> dict:
    """A snapshot or state dict, tensors on the CPU; a file that does not load is a ConfigError."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same to a user
        raise ConfigError(f"cannot load {path}: {err}") from None


def plain(value: Any) -> Any:
    """Config values as JSON-like python types (snapshots load with weights_only=True)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _model_of(system: dict) -> str | None:
    return system.get("model") or system.get("snapshot_name")


def config_difference(saved: dict, current: dict) -> list[str]:
    """What differs, in the settings that decide whether weights load, between a snapshot's
    config `saved` and the run's `current` (both {"system": {...}, "db": {...}}).

    Returns one readable line per difference, [] when the weights fit. Settings the snapshot
    does not record are not compared.
    """
    differences = []
    old, new = _model_of(saved.get("system", {})), _model_of(current.get("system", {}))
    if old is not None and old != new:
        differences.append(f"model: the snapshot holds {old}, this config builds {new}")
    old, new = saved.get("db", {}).get("categories"), current.get("db", {}).get("categories")
    if old is not None and old != new:
        differences.append(f"db.categories: the snapshot was trained for {old} classes, this "
                           f"config has {new}")
    return differences


def save(nnet: NetworkFactory, iteration: int, state: dict | None, path: Path) -> Path:
    """Write snapshot `iteration` of `nnet` with the loop's `state` atomically to `path`."""
    snapshot = {
        "format": SNAPSHOT_FORMAT,
        "iteration": iteration,
        "model": nnet.model.state_dict(),
        "optimizer": nnet.optimizer.state_dict(),
        "config": nnet.config_record(),
        "rng": {"torch": torch.get_rng_state()},
        **(state or {}),
    }
    if nnet.ema is not None:
        snapshot["ema"] = nnet.ema.state_dict()
    if nnet.device.type == "cuda":
        snapshot["rng"]["cuda"] = torch.cuda.get_rng_state(nnet.device)
    if nnet.scaler.is_enabled():
        snapshot["scaler"] = nnet.scaler.state_dict()
    write_atomic(snapshot, path)
    return path


def load(nnet: NetworkFactory, path: Path, iteration: int, model_only: bool) -> dict:
    """Restore `nnet` from the snapshot at `path` (ours, or an official plain state dict).

    Restores model, weight average (EMA), optimizer, gradient scaler (fp16) and RNG states (only
    the model and its average with `model_only`, for inference); returns the whole snapshot
    dict.
    """
    snapshot = read_snapshot(path)
    if snapshot.get("format") != SNAPSHOT_FORMAT:
        try:
            load_original_state_dict(nnet.model, snapshot)
        except RuntimeError as err:
            raise ConfigError(f"{path} does not fit this config: {err}") from None
        if nnet.ema is not None:  # a weight average restarts from official weights
            nnet.ema.restart(nnet.model)
        return {"iteration": iteration}
    differences = config_difference(snapshot.get("config", {}), nnet.config_record())
    if differences:
        raise ConfigError(f"{path} does not fit this config: {'; '.join(differences)}")
    nnet.model.load_state_dict(snapshot["model"])
    if nnet.ema is not None:
        nnet.ema.load(snapshot.get("ema"), nnet.model)
    if model_only:
        return snapshot
    algo = nnet.system_config.opt_algo
    saved_algo = snapshot.get("config", {}).get("system", {}).get("opt_algo")
    try:
        if saved_algo not in (None, algo):
            raise ValueError(f"it was trained with {saved_algo}, this config uses {algo}")
        nnet.optimizer.load_state_dict(snapshot["optimizer"])
    except ValueError as err:  # another optimizer, or other parameters frozen
        raise ConfigError(f"{path}: its optimizer state does not fit this config ({err}); "
                          f"to start from its weights, set system.pretrain to it") from None
    if nnet.scaler.is_enabled() and snapshot.get("scaler"):
        nnet.scaler.load_state_dict(snapshot["scaler"])
    torch.set_rng_state(snapshot["rng"]["torch"])
    if "cuda" in snapshot["rng"] and nnet.device.type == "cuda":
        torch.cuda.set_rng_state(snapshot["rng"]["cuda"], nnet.device)
    return snapshot


def load_pretrained(model: nn.Module, path: Path) -> list[str]:
    """Starting weights from a plain state dict or a snapshot; returns the skipped keys.

    Entries whose shape differs (a head for another class count) are skipped and named.
    """
    if not path.is_file():
        raise FileNotFoundError(f"system.pretrain: {path} does not exist")
    loaded = read_snapshot(path)
    loaded = strip_module_prefix(loaded.get("model", loaded)
                                 if loaded.get("format") == SNAPSHOT_FORMAT else loaded)
    own = model.state_dict()
    usable = {k: v for k, v in loaded.items() if k in own and own[k].shape == v.shape}
    skipped = sorted(set(loaded) - set(usable)) + sorted(set(own) - set(loaded))
    model.load_state_dict(usable, strict=False)
    if skipped:
        print(f"pretrained {path.name}: {len(usable)} entries loaded, {len(skipped)} skipped "
              f"(missing or other shape): {', '.join(skipped[:8])}"
              f"{' ...' if len(skipped) > 8 else ''}")
    return skipped

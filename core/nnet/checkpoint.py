"""Snapshot files: their format, writing them atomically, reading them back, and whether a
snapshot's config fits the run's. This module knows files, not the parts of a run.

A snapshot (`cache/nnet/<Cfg>/<Cfg>_<iter>.pkl`) is one dict: {"format", "iteration"} and the
state dicts of the run's parts side by side (the network's: model, optimizer, scaler, EMA, RNG,
config, class names; the loop's: data position, best AP, counters), each part reading its own keys
back. It loads with `weights_only=True`, so a snapshot cannot run code. An official CornerNet-Lite
snapshot (a plain state dict with `module.` keys) is not ours (`is_ours`) and loads as weights.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import ConfigError, UsageError, UserMistake
from ..models import strip_module_prefix
from ..utils.files import move_aside, write_atomic

if TYPE_CHECKING:
    from ..config import SystemConfig

SNAPSHOT_FORMAT = "cornernet-lite-modern/1"
# The resolved config of the config's last training, in its snapshot folder (core/engine/build.py)
RUN_CONFIG = "config.json"


class SnapshotMissing(UserMistake, FileNotFoundError):
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


def default_snapshot(system_config: SystemConfig,
                     log: Callable[[str], None] = print) -> int:
    """The snapshot a command takes when none is named: the final snapshot of the config's most
    recent training.

    That training's `max_iter` is the one its run folder's config.json records (written when
    a training starts: trained with `--set system.max_iter=300`, tested with the config alone).
    Without a record (snapshots from before it, or copied in), it is `system.max_iter` of the
    config as given. When the last training left no final snapshot but an earlier training of
    another `max_iter` did, neither is taken: a UsageError names both and `--testiter`. A
    record that cannot be read is moved aside (config.aside<k>.json) and said to `log`."""
    config_iter = system_config.max_iter
    trained = _recorded_max_iter(system_config.snapshot_dir / RUN_CONFIG, log)
    if trained is None or trained == config_iter:
        return config_iter
    name = system_config.snapshot_name
    if system_config.snapshot_file(trained).is_file():
        if system_config.snapshot_file(config_iter).is_file():
            log(f"note: taking {name}_{trained}.pkl, the final snapshot of the last training "
                f"(max_iter {trained}, {RUN_CONFIG}); {name}_{config_iter}.pkl is of an "
                f"earlier training: --testiter {config_iter} takes it")
        return trained
    if system_config.snapshot_file(config_iter).is_file():
        have = ", ".join(map(str, numbered(system_config))) or "none"
        raise UsageError(f"which snapshot of {name}? its last training (max_iter {trained}, "
                         f"{system_config.snapshot_dir / RUN_CONFIG}) left no {name}_{trained}"
                         f".pkl, and {name}_{config_iter}.pkl (the config's max_iter) is of an "
                         f"earlier training; name one with --testiter (iterations there: "
                         f"{have})")
    return config_iter


def _recorded_max_iter(path: Path, log: Callable[[str], None]) -> int | None:
    """The `system.max_iter` that the run record `path` holds; None without one. A damaged
    record is moved aside and said, as a damaged trackers.json is."""
    if not path.is_file():
        return None
    try:
        trained = json.loads(path.read_text())["system"]["max_iter"]
        if isinstance(trained, int) and not isinstance(trained, bool) and trained >= 0:
            return trained
        why = f"system.max_iter is {trained!r}, not an iteration"
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        why = f"{type(err).__name__}: {err}"
    except (KeyError, TypeError):
        why = "no system.max_iter in it"
    aside = move_aside(path)
    log(f"warning: {path} cannot be read ({why}); moved aside to {aside.name}, and the "
        f"snapshot taken without --testiter is the config's max_iter (the next training "
        f"records a new {path.name})")
    return None


def numbered(system_config: SystemConfig) -> dict[int, Path]:
    """Iteration -> path of every numbered snapshot of the run, oldest first. Only the names the
    run writes count (`<Cfg>_7.pkl`): a copy named `<Cfg>_007.pkl` is not snapshot 7's file."""
    pattern = re.compile(rf"{re.escape(system_config.snapshot_name)}_(0|[1-9]\d*)\.pkl")
    found = {}
    folder = system_config.snapshot_dir
    if folder.is_dir():
        for path in folder.iterdir():
            match = pattern.fullmatch(path.name)
            if match:
                found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def snapshot_label(system_config: SystemConfig, value: int | str | Path) -> int | str:
    """The iteration (a number, "best", "best.aside<k>") that `value` names: itself, or for the
    path of a snapshot file (--testiter FILE) the one in its name, `<Cfg>_<iteration>.pkl` in
    the config's snapshot folder, where test and export find their snapshots and name their
    outputs. A file elsewhere or named otherwise is a one-line UsageError saying what to do."""
    if not isinstance(value, Path):
        return value
    if not value.is_file():
        raise SnapshotMissing(f"no snapshot file {value}")
    prefix = f"{system_config.snapshot_name}_"
    label = value.stem.removeprefix(prefix) if value.stem.startswith(prefix) else ""
    named = int(label) if label.isdigit() else label
    if value.resolve() != system_config.snapshot_file(named).resolve():
        raise UsageError(f"--testiter {value}: test and export read the snapshots of the config, "
                         f"{system_config.snapshot_dir}/{prefix}<iteration>.pkl; copy the file "
                         "there under such a name, or run `cornernet predict --snapshot` on it")
    return named


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


def class_record(db: Any) -> dict | None:
    """The class names and dataset category ids of classes 1..C of dataset `db`, as snapshots
    and exported files record them: {"names": [str], "ids": [int]}; None when `db` has no
    class table (a dataset without annotations)."""
    if not getattr(db, "class_ids", None):
        return None
    count = len(db.class_ids)
    return {"names": [str(db.cls2name(c)) for c in range(1, count + 1)],
            "ids": [int(db.cls2coco(c)) for c in range(1, count + 1)]}


def recorded_classes(record: Any, categories: int) -> tuple[list[str], list[int]] | None:
    """(names, category ids) of a `class_record` read back from a file, or None when there is
    none (an older file) or it does not describe `categories` classes."""
    if not isinstance(record, dict):
        return None
    names, ids = record.get("names"), record.get("ids")
    if not (isinstance(names, list) and isinstance(ids, list)
            and len(names) == len(ids) == categories):
        return None
    if not all(isinstance(n, str) for n in names) or not all(isinstance(i, int) for i in ids):
        return None
    return list(names), list(ids)


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


def write(state: dict, iteration: int, path: Path) -> Path:
    """Write `state` (the parts' state dicts and the loop's state) as snapshot `iteration`
    atomically to `path`."""
    write_atomic({"format": SNAPSHOT_FORMAT, "iteration": iteration, **state}, path)
    return path


def is_ours(snapshot: dict) -> bool:
    """Whether a loaded file is a snapshot of this project (else an official plain state dict)."""
    return snapshot.get("format") == SNAPSHOT_FORMAT


def check_fits(snapshot: dict, current: dict, path: Path) -> None:
    """A ConfigError when the weights of `snapshot` cannot be this config's (`current`: its
    config record), naming every difference."""
    differences = config_difference(snapshot.get("config", {}), current)
    if differences:
        raise ConfigError(f"{path} does not fit this config: {'; '.join(differences)}")


def starting_weights(loaded: dict, path: Path) -> tuple[dict[str, torch.Tensor], str]:
    """The weights a file offers to start from, keys without `module.`, and what they are: an
    official state dict's own; a snapshot's averaged weights when it has them (those are the
    ones its evaluations, its best AP and test.py used), else its model's."""
    if not is_ours(loaded):
        return strip_module_prefix(loaded), "an official state dict"
    average = loaded.get("ema")
    if average:
        return (strip_module_prefix({k: v for k, v in average.items() if k != "n_averaged"}),
                f"snapshot {loaded.get('iteration')}, its averaged weights")
    if not isinstance(loaded.get("model"), dict):
        raise ConfigError(f"{path}: a snapshot without a 'model' entry")
    return strip_module_prefix(loaded["model"]), f"snapshot {loaded.get('iteration')}"


def _shape(tensor: torch.Tensor) -> str:
    return f"({','.join(str(n) for n in tensor.shape)})"


def load_pretrained(model: nn.Module, path: Path, categories: int, model_name: str,
                    log: Callable[[str], None] = print) -> list[str]:
    """Starting weights from a snapshot of this project or an official plain state dict, also
    of another class count; returns the keys of `model` that start fresh.

    Every tensor of the same key and shape loads bit for bit; the others of `model` (the class
    heads: of `categories` classes here, another count in the file) keep the values `model` was
    built with, and are named with their shapes in one line to `log`. A snapshot of another
    model than `model_name`, or a file of which not even half the tensors fit, is a
    ConfigError: its weights would not be a start."""
    if not path.is_file():
        raise ConfigError(f"system.pretrain: {path} does not exist")
    loaded = read_snapshot(path)
    saved_model = _model_of(loaded.get("config", {}).get("system", {})) if is_ours(loaded) \
        else None
    if saved_model is not None and saved_model != model_name:
        raise ConfigError(f"{path} holds a {saved_model}, this config builds {model_name}: "
                          f"start from weights of the same model")
    weights, what = starting_weights(loaded, path)
    own = model.state_dict()
    usable = {k: v for k, v in weights.items() if k in own and own[k].shape == v.shape}
    if len(usable) * 2 < len(own):
        raise ConfigError(f"{path}: only {len(usable)} of the {len(own)} tensors of "
                          f"{model_name} are in it with their shapes: it holds another model")
    fresh = [k for k in own if k not in usable]
    model.load_state_dict(usable, strict=False)
    before = sorted({int(weights[k].shape[0]) for k in fresh if k in weights
                     and own[k].ndim and own[k].shape[0] == categories})
    counts = f" (class count {before[0]} -> {categories})" if len(before) == 1 else ""
    unused = sorted(set(weights) - set(own))
    log(f"weights {path} ({what}): loaded {len(usable)} of the model's {len(own)} tensors"
        + (f"; re-initialised {len(fresh)} tensors{counts}: "
           + ", ".join(f"{k} {_shape(own[k])}" for k in fresh) if fresh else "")
        + (f"; {len(unused)} tensors of the file are not in {model_name}: "
           f"{', '.join(unused[:8])}{' ...' if len(unused) > 8 else ''}" if unused else ""))
    return fresh

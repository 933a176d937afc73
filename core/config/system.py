"""Configuration: the "system" and "db" sections of a config file, with strict checking.

Every key has a default and a type. Updating with an unknown key or a value of the wrong type is
an error that names the key and the closest valid one, so a typo never trains silently with a
default. Relative paths (data, cache, results) resolve against the project root (the checkout),
not against the current directory, so `train.py` and `test.py` behave the same from anywhere; an
installed package (`pip install .`, no checkout) resolves them against the working directory
(core/utils/layout.py says which this is, and where the shipped configs are).

Configs are found by name: in `--config-dir` when one is given, else in `configs/` of the working
directory first and then among the shipped ones (the checkout's configs/, or the installed
package's `cornernet/configs`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, closest
from ..utils.layout import CONFIG_DIR, PROJECT_ROOT
from .dataset_settings import DatasetSettings, resolve_path
from .db_keys import declared_keys
from .fine_tune import fine_tune_changes
from .overrides import parse_overrides
from .rules import NAME, check_db_rules, check_finite, check_system_rules

_NUMBER = (int, float)


# key: (default, allowed types, None allowed)
_SYSTEM_SCHEMA: dict[str, tuple[Any, tuple[type, ...], bool]] = {
    "dataset": (None, (str,), True),
    "sampling_function": ("cornernet", (str,), False),
    "model": (None, (str,), True),
    # training
    "display": (5, (int,), False),
    "snapshot": (400, (int,), False),
    "stepsize": (5000, (int,), False),
    "learning_rate": (0.001, _NUMBER, False),
    "decay_rate": (10, _NUMBER, False),
    "max_iter": (100000, (int,), False),
    "val_iter": (20, (int,), False),
    "batch_size": (1, (int,), False),
    "snapshot_name": (None, (str,), True),
    "prefetch_size": (100, (int,), False),
    "pretrain": (None, (str,), True),
    "opt_algo": ("adam", (str,), False),
    "weight_decay": (0.0, _NUMBER, False),
    "chunk_sizes": (None, (list,), True),
    "seed": (123, (int,), False),
    "nonfinite_loss": ("stop", (str,), False),
    "strict_images": (False, (bool,), False),
    # the step on its device (core/nnet/step_path.py): "auto" is the fastest correct choice
    # of the device (bf16 autocast, compiled, one forward on a GPU; today's step on the CPU)
    "amp": ("auto", (str,), True),
    "sync_bn": (False, (bool,), False),
    "channels_last": (False, (bool,), False),
    "compile": ("auto", (bool, str), False),
    "compile_mode": ("default", (str,), False),
    "one_forward": ("auto", (bool, str), False),
    "deterministic": (False, (bool,), False),
    # watching and steering a run
    "eval_iter": (0, (int,), False),
    "eval_images": (None, (int,), True),
    "keep_snapshots": (None, (int,), True),
    "warmup_iters": (0, (int,), False),
    "warmup_factor": (0.001, _NUMBER, False),
    "clip_grad_norm": (None, _NUMBER, True),
    "freeze": (None, (list,), True),
    "test_batch_size": (1, (int,), False),
    # an exponential moving average of the weights (core/nnet/ema.py); null is off
    "ema_decay": (None, _NUMBER, True),
    "ema_warmup": (2000, (int,), False),
    # clusters: the signal that means "snapshot, exit 75, resume me", requeueing the SLURM job
    # then, and snapshots every M minutes of wall time besides the periodic ones
    "stop_signal": ("USR1", (str,), False),
    "requeue": (False, (bool,), False),
    "snapshot_minutes": (None, _NUMBER, True),
    # train_batch0.jpg in the snapshot folder at the start of a run (tools/check_data.py draws it)
    "batch_pictures": (True, (bool,), False),
    # the run report at the end of a run (core/engine/curves.py: metrics.png and the last
    # evaluation's pictures in the snapshot folder); false: metrics.jsonl alone, for sweeps of
    # many short runs, where drawing costs a second of CPU per run
    "run_report": (True, (bool,), False),
    # stopping rules (core/engine/limits.py): evaluations without a better AP; wall-clock minutes
    "patience": (None, (int,), True),
    "max_minutes": (None, _NUMBER, True),
    # experiment trackers (core/engine/trackers.py): "mlflow", "wandb"; "tensorboard" (written
    # whenever installed) asks to be told when it is not;
    # CORNERNET_TRACKERS=mlflow,wandb turns them on too
    "trackers": (None, (list,), True),
    # TensorBoard's event files in the snapshot folder's tb/ (when installed); false: none,
    # and its import (a fifth of a second) is not paid
    "tensorboard": (True, (bool,), False),
    "mlflow_uri": (None, (str,), True),
    "mlflow_experiment": (None, (str,), True),
    "wandb_project": (None, (str,), True),
    # directories
    "data_dir": ("./data", (str,), False),
    "cache_dir": ("./cache", (str,), False),
    "result_dir": ("./results", (str,), False),
    # splits
    "train_split": ("training", (str,), False),
    "val_split": ("validation", (str,), False),
    "test_split": ("testdev", (str,), False),
}

SYSTEM_KEYS = frozenset(_SYSTEM_SCHEMA)

# Counts and periods that must be at least 1 (a 0 would divide by zero mid-training).
_POSITIVE = {"snapshot", "stepsize", "batch_size", "prefetch_size", "decay_rate", "categories",
             "max_objects", "test_batch_size", "eval_images", "keep_snapshots", "clip_grad_norm",
             "warmup_factor", "snapshot_minutes", "patience", "max_minutes"}

# The soft-NMS methods of core/inference/soft_nms.py (db.nms_algorithm).
NMS_ALGORITHMS = ("nms", "linear_soft_nms", "exp_soft_nms")

_CHOICES = {
    "nms_algorithm": NMS_ALGORITHMS,
    "opt_algo": ("adam", "sgd"),
    "nonfinite_loss": ("stop", "skip"),
    "amp": ("auto", "fp32", "bf16", "fp16"),
    "compile_mode": ("default", "reduce-overhead"),
    "stop_signal": ("USR1", "USR2", "TERM", "HUP"),
}

# Keys that are true, false or "auto" (decided by the device: core/nnet/step_path.py).
_AUTO_BOOL = {"compile", "one_forward"}

# Keys that the original's configs carry but its code never read. Accepting them silently would
# hide typos; rejecting them without a word would puzzle people porting a config.
_IGNORED_BY_ORIGINAL = {"rand_full_crop", "height_mult", "width_mult", "view_sizes", "max_scale",
                        "score_threshold", "max_per_set", "data_aug", "config_dir"}

_DB_SCHEMA: dict[str, tuple[Any, tuple[type, ...], bool]] = {
    "categories": (80, (int,), False),
    "rand_scales": ([1], (list,), True),
    "rand_scale_min": (0.8, _NUMBER, False),
    "rand_scale_max": (1.4, _NUMBER, False),
    "rand_scale_step": (0.2, _NUMBER, False),
    "input_size": ([383, 383], (list,), False),
    "output_sizes": ([[96, 96], [48, 48], [24, 24], [12, 12]], (list,), False),
    "nms_threshold": (0.7, _NUMBER, False),
    "max_per_image": (100, (int,), False),
    "top_k": (20, (int,), False),
    "ae_threshold": (1, _NUMBER, False),
    "nms_kernel": (3, (int,), False),
    "num_dets": (1000, (int,), False),
    "nms_algorithm": ("exp_soft_nms", (str,), False),
    "weight_exp": (8, _NUMBER, False),
    "merge_bbox": (False, (bool,), False),
    "lighting": (True, (bool,), False),
    "border": (64, (int,), False),
    "gaussian_bump": (False, (bool,), False),
    "gaussian_iou": (0.7, _NUMBER, False),
    "gaussian_radius": (-1, (int,), False),
    "rand_crop": (False, (bool,), False),
    "rand_color": (False, (bool,), False),
    "rand_center": (True, (bool,), False),
    "init_sizes": ([192, 255], (list,), False),
    "min_scale": (16, _NUMBER, False),
    "att_sizes": ([[16, 16], [32, 32], [64, 64]], (list,), False),
    "att_ranges": ([[96, 256], [32, 96], [0, 32]], (list,), False),
    "att_ratios": ([16, 8, 4], (list,), False),
    # One list of zoom factors per attention round, as CornerNet_Saccade.json sets them (the
    # original's flat defaults could not run its own test path).
    "att_scales": ([[1, 1.5, 2]], (list,), False),
    "att_thresholds": ([0.3], (list,), False),
    "att_nms_ks": ([3, 3, 3], (list,), False),
    "att_max_crops": (8, (int,), False),
    "ref_dets": (True, (bool,), False),
    "test_scales": ([1], (list,), False),
    "test_flipped": (True, (bool,), False),
    # "auto": a few fixed canvas sizes on a GPU, none on the CPU; or a list of [h, w] sizes
    # (core/inference/buckets.py).
    "test_buckets": ("auto", (str, list), False),
    # additions of this project
    "max_objects": (128, (int,), False),
    "num_train_images": (2000, (int,), False),
    "num_val_images": (200, (int,), False),
    # and the keys each dataset declares (core/config/db_keys.py), e.g. COCO's image_dirs
}


def _db_schema() -> dict[str, tuple[Any, tuple[type, ...], bool]]:
    """The common db keys and those the registered datasets declare."""
    declared = declared_keys()
    clash = sorted(set(declared) & set(_DB_SCHEMA))
    if clash:
        raise ValueError(f"datasets declare common db keys {clash}; declare only their own")
    return {**_DB_SCHEMA, **{key: spec.schema for key, spec in declared.items()}}


def _type_name(types: tuple[type, ...], nullable: bool) -> str:
    names = ["number"] if types == _NUMBER else [t.__name__ for t in types]
    if types == (bool, str):
        names = ["true, false or \"auto\""]
    return " or ".join(names + (["null"] if nullable else []))


def _check(section: str, schema: dict, new: dict, where: str) -> dict:
    """Validate `new` against `schema`; return a copy of it (values unchanged)."""
    if not isinstance(new, dict):
        raise ConfigError(f"{where}: section '{section}' must be a JSON object, got "
                          f"{type(new).__name__}")
    for key, value in new.items():
        if key not in schema:
            if key in _IGNORED_BY_ORIGINAL:
                raise ConfigError(
                    f"{where}: {section}.{key} is not a setting here (the original accepted it "
                    f"and never used it); remove it from the config")
            raise ConfigError(f"{where}: unknown key {section}.{key}; "
                              f"{closest(key, list(schema))}")
        _, types, nullable = schema[key]
        ok = (value is None and nullable) or (
            isinstance(value, types) and not (isinstance(value, bool) and bool not in types))
        if not ok:
            hint = (f"; valid: {', '.join(_CHOICES[key])} or null"
                    if key in _CHOICES and nullable else "")
            raise ConfigError(
                f"{where}: {section}.{key} must be {_type_name(types, nullable)}, got "
                f"{type(value).__name__} {value!r}{hint}")
        check_finite(section, key, value, where)
        if key in _AUTO_BOOL and isinstance(value, str) and value != "auto":
            raise ConfigError(f"{where}: {section}.{key} is '{value}'; valid: true, false or "
                              f"\"auto\"")
        if key in _POSITIVE and value is not None and value <= 0:
            raise ConfigError(f"{where}: {section}.{key} must be greater than 0, got {value}")
        if key in _CHOICES and value is not None and value not in _CHOICES[key]:
            raise ConfigError(f"{where}: {section}.{key} is '{value}'; valid: "
                              f"{', '.join(_CHOICES[key])}")
    return dict(new)


def check_db_config(new: dict, where: str = "db config") -> dict:
    """The full db section: defaults updated with `new`, strictly checked.

    `rand_scales: null` expands to `arange(rand_scale_min, rand_scale_max, rand_scale_step)`
    as the original does.
    """
    schema = _db_schema()
    configs = {key: _copy(default) for key, (default, _, _) in schema.items()}
    configs.update(_check("db", schema, new, where))
    if configs["rand_scales"] is None:
        configs["rand_scales"] = np.arange(
            configs["rand_scale_min"], configs["rand_scale_max"], configs["rand_scale_step"]
        ).tolist()
    check_db_rules(configs, where)
    scales, rounds = configs["att_scales"], len(configs["att_thresholds"])
    if not all(isinstance(s, list) and len(s) == len(configs["att_sizes"]) for s in scales) \
            or len(scales) < rounds:
        raise ConfigError(f"{where}: db.att_scales must hold, for each of the {rounds} "
                          f"attention rounds (att_thresholds), a list of "
                          f"{len(configs['att_sizes'])} zoom factors (one per att_sizes entry), "
                          f"got {scales}")
    return configs


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


class _ReadOnly(dict):
    """A copy of the system section that refuses writes: a change goes through
    `SystemConfig.replace`, which checks it as a config file's would be."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("the system config is read-only; make a checked copy with "
                        "system_config.replace(key=value)")

    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    update = pop = popitem = clear = setdefault = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return type(self), (dict(self),)


class SystemConfig:
    """The "system" section: training schedule, names, directories and splits. Immutable.

    Values are read as attributes (`cfg.batch_size`); `full` is a read-only copy of them all.
    `update_config` and `replace` return a new config, checked by the rules of a config file.
    """

    def __init__(self, root_dir: Path | str = PROJECT_ROOT) -> None:
        configs = {key: _copy(default) for key, (default, _, _) in _SYSTEM_SCHEMA.items()}
        object.__setattr__(self, "_configs", configs)
        object.__setattr__(self, "_root", Path(root_dir))

    def update_config(self, new: dict, where: str = "system config") -> SystemConfig:
        """A new config: this one with the values of `new` (a config file's system section),
        strictly checked; `where` names the source in error messages."""
        merged = {**self._configs, **_check("system", _SYSTEM_SCHEMA, new, where)}
        check_system_rules(merged, where)
        chunks = merged["chunk_sizes"]
        if chunks is not None and sum(chunks) != merged["batch_size"]:
            raise ConfigError(f"{where}: system.chunk_sizes {chunks} sum to {sum(chunks)}, "
                              f"not batch_size {merged['batch_size']}")
        changed = SystemConfig(self._root)
        object.__setattr__(changed, "_configs", _copy(merged))
        return changed

    def replace(self, **changes: Any) -> SystemConfig:
        """A new config with `changes`, checked as a config file's system section is."""
        return self.update_config(changes, "a change of the system config")

    @property
    def full(self) -> dict:
        """Every value, as a read-only dict (a copy: changing a list in it changes nothing)."""
        return _ReadOnly(_copy(self._configs))

    def __getattr__(self, key: str) -> Any:
        configs = self.__dict__.get("_configs")
        if configs is None or key not in configs:
            raise AttributeError(key)
        value = configs[key]
        return _copy(value) if isinstance(value, (list, dict)) else value

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"the system config is read-only (setting {key}); make a "
                             f"checked copy with system_config.replace({key}=...)")

    def __delattr__(self, key: str) -> None:
        self.__setattr__(key, None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SystemConfig):
            return NotImplemented
        return (self._configs, self._root) == (other._configs, other._root)

    def __hash__(self) -> int:
        return hash((json.dumps(self._configs, sort_keys=True), self._root))

    def resolve(self, path: str | Path) -> Path:
        """`path` as an absolute path; relative ones are taken from the project root."""
        return resolve_path(self._root, path)

    def dataset_settings(self) -> DatasetSettings:
        """The values a dataset reads (`core.dbs` takes them instead of this config)."""
        return DatasetSettings(data_dir=self.data_dir, cache_dir=self.cache_dir,
                               train_split=self.train_split, strict_images=self.strict_images,
                               seed=self.seed, root=self._root)

    @property
    def model_name(self) -> str:
        """The model module's name: `system.model`, else the config (snapshot) name."""
        return self.model or self.snapshot_name

    @property
    def root_dir(self) -> Path:
        return self._root

    @property
    def data_dir(self) -> Path:  # type: ignore[override]
        return self.resolve(self._configs["data_dir"])

    @property
    def cache_dir(self) -> Path:  # type: ignore[override]
        return self.resolve(self._configs["cache_dir"])

    @property
    def result_dir(self) -> Path:  # type: ignore[override]
        return self.resolve(self._configs["result_dir"]) / str(self.snapshot_name)

    @property
    def snapshot_dir(self) -> Path:
        return self.cache_dir / "nnet" / str(self.snapshot_name)

    def snapshot_file(self, iteration: int) -> Path:
        return self.snapshot_dir / f"{self.snapshot_name}_{iteration}.pkl"


def config_dirs(config_dir: Path | None = CONFIG_DIR) -> list[Path]:
    """Where config names are looked up, first first: a `--config-dir` alone; by default
    (`CONFIG_DIR` or None) `configs/` of the working directory, then the shipped configs."""
    if config_dir is not None and Path(config_dir) != CONFIG_DIR:
        return [Path(config_dir)]
    local = Path.cwd() / "configs"
    return [local, CONFIG_DIR] if local.resolve() != CONFIG_DIR.resolve() else [CONFIG_DIR]


def config_path(name: str, config_dir: Path | None = CONFIG_DIR) -> Path:
    """The file of config `name`; names are never paths, unknown ones list the valid names."""
    folders = config_dirs(config_dir)
    if not NAME.match(name):  # never "did you mean" itself: say what a name must be
        plain = ("a plain name (letters, digits, '_', '.', '-'): it names the cache and result "
                 "folders")
        found = [f for f in folders if "/" not in name and (f / f"{name}.json").is_file()]
        if found:
            raise ConfigError(f"config {name!r} in {found[0]} is not {plain}; rename "
                              f"{name}.json to one")
        raise ConfigError(f"unknown config {name!r} (looked in "
                          f"{', '.join(map(str, folders))}): a config is {plain}, never a path")
    for folder in folders:
        if (folder / f"{name}.json").is_file():
            return folder / f"{name}.json"
    available = sorted({p.stem for folder in folders for p in folder.glob("*.json")
                        if NAME.match(p.stem)})
    raise ConfigError(f"unknown config '{name}' (looked in {', '.join(map(str, folders))}); "
                      f"{closest(name, available) if available else 'no configs found'}")


def run_folders(name: str, config_dir: Path | None = CONFIG_DIR) -> list[Path]:
    """Where the run `name`'s recorded config is looked for: `<config_dir>/<name>/` when a
    --config-dir is given (a cache's nnet/ folder), then the default cache of the project root
    and of the working directory."""
    given = [Path(config_dir)] if config_dir is not None and Path(config_dir) != CONFIG_DIR \
        else []
    nnets = given + [root / "cache" / "nnet" for root in (PROJECT_ROOT, Path.cwd())]
    return [folder / name for folder in dict.fromkeys(nnets)]


def run_record(name: str, config_dir: Path | None = CONFIG_DIR) -> Path | None:
    """The recorded config of the run `name` (a run trained with `--data`: its folder's
    config.json) in one of `run_folders`; None when there is none."""
    if not NAME.match(name):
        return None
    return next((folder / "config.json" for folder in run_folders(name, config_dir)
                 if (folder / "config.json").is_file()), None)


def overrides_of(overrides: list[str] | None) -> dict[str, dict]:
    """The `--set` items as {"system": {...}, "db": {...}}, their keys checked."""
    return parse_overrides(overrides, {"system": _SYSTEM_SCHEMA, "db": _db_schema()})


def read_json(path: Path) -> Any:
    """Parse a JSON file; errors name the file and the line."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: malformed JSON at line {err.lineno} column {err.colno}: "
                          f"{err.msg}") from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deep to read; a config is two levels of "
                          f"objects holding values and short lists") from None


def _merged(section: Any, changes: dict) -> Any:
    """A file's section with the --set changes (a section that is not an object is refused
    by the check as it is)."""
    return {**section, **changes} if isinstance(section, dict) else section


def apply_overrides(system: SystemConfig, db: dict, overrides: list[str] | None,
                    where: str) -> tuple[SystemConfig, dict]:
    """`system` and `db` (a config already read: a snapshot's or an export's record) with the
    `--set` `overrides` applied and checked as a config file's values are (as `load_config`
    applies them to a file); `where` names the config in errors."""
    if not overrides:
        return system, db
    changes = parse_overrides(overrides, {"system": _SYSTEM_SCHEMA, "db": _DB_SCHEMA})
    _check("db", _DB_SCHEMA, changes["db"], "--set")
    where = f"{where} with --set"
    return (system.update_config(changes["system"], where),
            check_db_config({**db, **changes["db"]}, where))


def _fine_tuned(content: dict, weights: str | Path) -> bool:
    """Whether a run's recorded config starts from `weights` already, with its fine-tuning
    settings applied when it was written (a `--data` run, a run resumed by name): applied
    again, the learning rate would fall tenfold each time."""
    return content.get("system", {}).get("pretrain") == str(Path(weights).expanduser().resolve())


def load_config(name: str, config_dir: Path | None = CONFIG_DIR,
                root_dir: Path | None = None,
                overrides: list[str] | None = None,
                weights: str | Path | None = None) -> tuple[SystemConfig, dict]:
    """Read `<config_dir>/<name>.json` into a SystemConfig and a checked db dict, with the
    `--set` `overrides` ("section.key=value") applied and checked as "--set". `weights`
    (train's --weights FILE) starts from FILE with the fine-tuning learning rate and warm-up
    (core/config/fine_tune.py) where --set does not give them.

    The snapshot name defaults to the config name, as in the original. A name that no config
    file has is the run of that name when one recorded its config (`run_record`: in
    `<config_dir>/<name>/`, or the default caches).
    """
    try:
        path = config_path(name, config_dir)
    except ConfigError as err:
        path = run_record(name, config_dir)
        if path is None and not NAME.match(name):  # no run has such a name: what a name is
            raise
        if path is None:
            places = " or ".join(map(str, run_folders(name, config_dir)))
            raise ConfigError(f"{err}; nor is it a run trained with --data (no config.json in "
                              f"{places}; a run in another cache: --config-dir <cache>/nnet)"
                              ) from None
    content = read_json(path)
    if not isinstance(content, dict) or set(content) - {"system", "db"}:
        extra = set(content) - {"system", "db"} if isinstance(content, dict) else ""
        raise ConfigError(f"{path}: a config holds only 'system' and 'db' sections"
                          f"{'; found ' + ', '.join(sorted(extra)) if extra else ''}")
    db_schema = _db_schema()
    changes = parse_overrides(overrides, {"system": _SYSTEM_SCHEMA, "db": db_schema})
    _check("system", _SYSTEM_SCHEMA, changes["system"], "--set")
    _check("db", db_schema, changes["db"], "--set")
    where = f"{path} with --set" if overrides else str(path)
    system = SystemConfig(PROJECT_ROOT if root_dir is None else root_dir).update_config(
        _merged(content.get("system", {}), changes["system"]), where)
    if system.snapshot_name is None:
        system = system.replace(snapshot_name=name)
    if weights is not None and not _fine_tuned(content, weights):
        system = system.update_config(fine_tune_changes(
            weights, system.learning_rate, system.warmup_iters, system.max_iter,
            changes["system"]), f"{where} with --weights")
    db = check_db_config(_merged(content.get("db", {}), changes["db"]), where)
    return system, db

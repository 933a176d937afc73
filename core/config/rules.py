"""Rules a config must obey beyond key names and types: values that cannot be right.

`core.config` checks that every key is known and of its type; the rules here check what the
values mean, on the whole section with defaults filled in, so that a run is refused at load
instead of failing hours later or, worse, running on nonsense:

- counts, periods and sizes that must be positive (`max_iter: 0`, `input_size: [0, 511]`);
- lists whose entries have a shape (`output_sizes` is a list of [height, width] pairs);
- names used as path components (`snapshot_name`, the split keys) that must be plain names,
  so that nothing is written outside the configured folders;
- values the code cannot hold: integers beyond 64 bits (`max_iter`, `seed`, counts reach
  torch and numpy as int64), a weight decay above 1, a `top_k` whose corner pairs (top_k ** 2
  per image and class) no memory holds; and `decay_rate` below 1, which the step schedule divides
  by, so it would raise the learning rate at every step (PyTorch's `gamma` is its inverse): refused;
(input and output sizes that a model can produce are checked by `core.models.fit`).
Every failure is a ConfigError with one line naming the key, the value and what to do.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import ConfigError
from .db_keys import declared_keys

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")

# Periods where 0 means "never" (display, validation); negative ones are mistakes.
_PERIODS = ("display", "val_iter", "eval_iter", "warmup_iters")
_POSITIVE_DB = ("max_per_image", "top_k", "num_dets", "nms_kernel", "att_max_crops",
                "num_train_images", "num_val_images", "rand_scale_min", "rand_scale_max",
                "rand_scale_step", "weight_exp")
_NON_NEGATIVE_DB = ("border", "min_scale", "nms_threshold", "ae_threshold")
_POSITIVE_LISTS = ("rand_scales", "test_scales", "init_sizes", "att_ratios", "att_nms_ks")
# Integers reach torch and numpy as int64.
INT64 = 2 ** 63
# Decoding scores top_k * top_k corner pairs per image and class: 4096 is 64 MiB of float32.
MAX_TOP_K = 4096


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_finite(section: str, key: str, value: Any, where: str) -> None:
    """Numbers, also inside lists, must be finite (JSON readers accept NaN and Infinity) and
    integers within 64 bits."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: {section}.{key} must be a finite number, got {value}")
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        raise ConfigError(f"{where}: {section}.{key} is {value}, beyond the 64-bit integers the "
                          f"code holds (below 2**63 = {INT64})")
    if isinstance(value, list):
        for item in value:
            check_finite(section, key, item, where)


def check_plain_name(value: str, what: str, where: str) -> None:
    """A name that becomes a folder or file name: letters, digits, '_', '.', '-'."""
    if not NAME.match(value) or value in (".", ".."):
        raise ConfigError(f"{where}: {what} '{value}' must be a plain name (letters, digits, "
                          f"'_', '.', '-'; no '/', '..' or absolute path): it names a folder "
                          f"under the configured cache and result folders")


def check_system_rules(configs: dict, where: str) -> None:
    """Rules of the system section; `configs` is the whole section, defaults filled in."""
    _check_counts(configs, where)
    _check_learning(configs, where)
    _check_data_and_names(configs, where)
    _check_step(configs, where)
    _check_trackers(configs, where)


def _check_trackers(configs: dict, where: str) -> None:
    """TensorBoard asked for (system.trackers) cannot also be turned off (system.tensorboard)."""
    if not configs["tensorboard"] and "tensorboard" in (configs["trackers"] or []):
        raise ConfigError(f"{where}: system.trackers names \"tensorboard\" and "
                          f"system.tensorboard is false; drop one of the two")


def _check_step(configs: dict, where: str) -> None:
    """CUDA graphs (`compile_mode: "reduce-overhead"`) exist only for a compiled step."""
    if configs["compile_mode"] != "default" and configs["compile"] is False:
        raise ConfigError(f"{where}: system.compile_mode \"{configs['compile_mode']}\" needs a "
                          f"compiled step; set system.compile to \"auto\" or true, or "
                          f"compile_mode to \"default\"")


def _check_counts(configs: dict, where: str) -> None:
    """The iteration count, the periods and the seed."""
    if configs["max_iter"] < 1:
        raise ConfigError(f"{where}: system.max_iter must be at least 1 (the last iteration "
                          f"to train), got {configs['max_iter']}")
    for key in _PERIODS:
        if configs[key] < 0:
            raise ConfigError(f"{where}: system.{key} must be 0 (never) or more, got "
                              f"{configs[key]}")
    if configs["seed"] < 0:
        raise ConfigError(f"{where}: system.seed must be 0 or more (numpy's generators take no "
                          f"negative seed), got {configs['seed']}")


def _check_learning(configs: dict, where: str) -> None:
    """The learning rate, its warm-up and schedule, the weight decay and the weight average."""
    if configs["warmup_factor"] > 1:
        raise ConfigError(f"{where}: system.warmup_factor must be in (0, 1] (the share of the "
                          f"learning rate the warm-up starts from), got {configs['warmup_factor']}")
    for key in ("learning_rate", "weight_decay"):
        if configs[key] < 0:
            raise ConfigError(f"{where}: system.{key} must be 0 or more, got {configs[key]}")
    if configs["weight_decay"] > 1:
        raise ConfigError(f"{where}: system.weight_decay must be at most 1 (it scales the "
                          f"weights' own pull on every step; 1e-4 to 5e-2 are usual), got "
                          f"{configs['weight_decay']}")
    _check_schedule(configs, where)
    decay = configs["ema_decay"]
    if decay is not None and not 0 < decay < 1:
        raise ConfigError(f"{where}: system.ema_decay must lie between 0 and 1 (0.9998 as YOLOX, "
                          f"or null for no average), got {decay}")
    if configs["ema_warmup"] < 0:
        raise ConfigError(f"{where}: system.ema_warmup must be 0 (no warm-up) or more steps, "
                          f"got {configs['ema_warmup']}")


def _check_data_and_names(configs: dict, where: str) -> None:
    """The chunk sizes, early stopping's need for evaluations, and the names of folders."""
    chunks = configs["chunk_sizes"]
    if chunks is not None and not (chunks and all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in chunks)):
        raise ConfigError(f"{where}: system.chunk_sizes must be a non-empty list of positive "
                          f"integers, got {chunks}")
    if configs["patience"] is not None and configs["eval_iter"] == 0:
        raise ConfigError(f"{where}: system.patience counts evaluations, but system.eval_iter "
                          f"is 0 (never evaluate); set eval_iter, or patience to null")
    if configs["snapshot_name"] is not None:
        check_plain_name(configs["snapshot_name"], "system.snapshot_name", where)
    for key in ("train_split", "val_split", "test_split"):
        check_plain_name(configs[key], f"system.{key}", where)


def _check_schedule(configs: dict, where: str) -> None:
    """decay_rate divides the learning rate every `stepsize` iterations: at least 1 (its power
    beyond a float is a rate of 0, see core.engine.schedule)."""
    rate = configs["decay_rate"]
    if rate < 1:
        raise ConfigError(f"{where}: system.decay_rate {rate} is below 1: the learning rate is "
                          f"divided by it every system.stepsize iterations, so it would grow "
                          f"(PyTorch's gamma is its inverse: gamma {rate} is decay_rate "
                          f"{1 / rate:g}); use a decay_rate of 1 or more")


def _positive_int_pair(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value))


def check_db_rules(configs: dict, where: str) -> None:
    """Rules of the db section; `configs` is the whole section, defaults filled in."""
    _check_db_shapes(configs, where)
    _check_test_buckets(configs["test_buckets"], where)
    _check_db_decoding(configs, where)
    _check_db_targets(configs, where)
    _check_db_paths_and_names(configs, where)


def _check_db_shapes(configs: dict, where: str) -> None:
    """Sizes, pairs and lists whose entries have a shape."""
    if not _positive_int_pair(configs["input_size"]):
        raise ConfigError(f"{where}: db.input_size must be [height, width], two positive "
                          f"integers, got {configs['input_size']}")
    for key in ("output_sizes", "att_sizes"):
        if not configs[key] or not all(map(_positive_int_pair, configs[key])):
            raise ConfigError(f"{where}: db.{key} must be a non-empty list of [height, width] "
                              f"pairs of positive integers, got {configs[key]}")
    ranges = configs["att_ranges"]
    if not ranges or not all(isinstance(r, list) and len(r) == 2
                             and all(_is_number(x) and x >= 0 for x in r) for r in ranges):
        raise ConfigError(f"{where}: db.att_ranges must be a non-empty list of [low, high] "
                          f"pairs of non-negative numbers, got {ranges}")
    for key in _POSITIVE_LISTS:
        value = configs[key]
        if not value or not all(_is_number(v) and v > 0 for v in value):
            raise ConfigError(f"{where}: db.{key} must be a non-empty list of positive numbers, "
                              f"got {value}")


def _check_test_buckets(value: Any, where: str) -> None:
    """"auto", or [height, width] canvas sizes on the test canvases' grid (core/inference/
    cornernet.py: every side is k * 128 - 1)."""
    if value == "auto":
        return
    if not isinstance(value, list) or not all(
            isinstance(pair, list) and len(pair) == 2
            and all(isinstance(side, int) and not isinstance(side, bool) and side > 0
                    and (side + 1) % 128 == 0 for side in pair) for pair in value):
        raise ConfigError(f"{where}: db.test_buckets must be \"auto\" or a list of [height, "
                          f"width] canvas sizes, each side k * 128 - 1 (255, 511, 767, ...), [] "
                          f"for none; got {value}")


def _check_db_decoding(configs: dict, where: str) -> None:
    """Positive counts, and what decoding can hold: top_k, odd kernels, an IoU threshold."""
    for key in _POSITIVE_DB:
        if configs[key] <= 0:
            raise ConfigError(f"{where}: db.{key} must be greater than 0, got {configs[key]}")
    if configs["top_k"] > MAX_TOP_K:
        raise ConfigError(f"{where}: db.top_k {configs['top_k']} is more than {MAX_TOP_K}: "
                          f"decoding scores top_k * top_k corner pairs per image and class "
                          f"(100 is the original's largest)")
    for key, kernels in (("nms_kernel", [configs["nms_kernel"]]),
                         ("att_nms_ks", configs["att_nms_ks"])):
        if any(isinstance(k, int) and k % 2 == 0 for k in kernels):
            raise ConfigError(f"{where}: db.{key} must be odd (a window centred on its pixel: "
                              f"1, 3, 5, ...), got {configs[key]}")
    if not configs["nms_threshold"] <= 1:
        raise ConfigError(f"{where}: db.nms_threshold is an IoU, between 0 and 1, got "
                          f"{configs['nms_threshold']}")
    for key in _NON_NEGATIVE_DB:
        if configs[key] < 0:
            raise ConfigError(f"{where}: db.{key} must be 0 or more, got {configs[key]}")


def _check_db_targets(configs: dict, where: str) -> None:
    """The corner targets' gaussians, the random scales and the attention thresholds."""
    if not 0 < configs["gaussian_iou"] < 1:
        raise ConfigError(f"{where}: db.gaussian_iou must be between 0 and 1 (the overlap a "
                          f"corner's radius keeps), got {configs['gaussian_iou']}")
    if configs["gaussian_radius"] < -1:
        raise ConfigError(f"{where}: db.gaussian_radius must be -1 (from gaussian_iou) or 0 "
                          f"or more, got {configs['gaussian_radius']}")
    if configs["rand_scale_min"] > configs["rand_scale_max"]:
        raise ConfigError(f"{where}: db.rand_scale_min {configs['rand_scale_min']} is above "
                          f"db.rand_scale_max {configs['rand_scale_max']}")
    if not all(_is_number(t) and 0 <= t <= 1 for t in configs["att_thresholds"]):
        raise ConfigError(f"{where}: db.att_thresholds must be scores between 0 and 1, got "
                          f"{configs['att_thresholds']}")


def _check_db_paths_and_names(configs: dict, where: str) -> None:
    """Split paths (a declared path key holding a dict) are strings; class names are distinct
    non-empty strings."""
    for key, spec in declared_keys().items():
        paths = configs.get(key)
        if spec.path and isinstance(paths, dict) and \
                not all(isinstance(p, str) and p for p in paths.values()):
            raise ConfigError(f"{where}: db.{key} must map each split key to a path (a "
                              f"string), got {paths}")
    names = configs.get("names")
    if names is not None and not (names and all(isinstance(n, str) and n for n in names)
                                  and len(set(names)) == len(names)):
        raise ConfigError(f"{where}: db.names must list distinct class names (non-empty "
                          f"strings) in class order, got {names}")


def check_decode_settings(configs: dict, where: str = "db config") -> None:
    """Test settings decoding can use: num_dets boxes out of top_k * top_k corner pairs.

    Checked where detection is going to run (test.py, demo.py, evaluation during training),
    not at load: a config that only trains may leave the test settings at their defaults.
    """
    if configs["num_dets"] > configs["top_k"] ** 2:
        raise ConfigError(f"{where}: db.num_dets {configs['num_dets']} is more than the "
                          f"top_k * top_k = {configs['top_k'] ** 2} corner pairs there are; "
                          f"lower db.num_dets or raise db.top_k")


def unit_interval(text: str) -> float:
    """A command-line value for scores and IoU thresholds: a number in [0, 1] (never NaN)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:  # NaN fails too
        raise ValueError(f"expected a number from 0 to 1, got {text!r}")
    return value

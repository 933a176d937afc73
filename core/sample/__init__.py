"""Training-sample builders, selected by `system.sampling_function`: the one registry of sampling
functions, `sampling_functions` (`sampling_function(name)` looks one up; an unknown name lists
the valid ones). Each is a `SamplingFunction` record: its batch, its layout, the original's call
form, its training view of one image and whether settings advice applies to it; its inference is
core/inference/registry.py's, found by this record.

    batch, k_ind = sampling_function(name).batch(db, k_ind, batch_size, data_aug=True,
                                                 strict_images=False)

builds `batch_size` images from position `k_ind` of `db.db_inds` (calling `db.shuffle_inds()`
whenever the position wraps to 0) and returns the batch and the next position. All randomness
comes from `db.rng`. With data_aug False (validation) nothing is random: the whole image is
resized to input_size, not flipped, and its colour only normalised. Under strict_images an
unreadable image raises ImageReadError instead of being skipped (and named in meta["skipped"]).
`sampler(name, strict_images)` is that function with strict_images bound, as the prefetcher
calls it. The original's call form reads batch_size and strict_images from a SystemConfig:

    batch, k_ind = data_sampling_func[name](system_config, db, k_ind, data_aug=True)

The batch (what crosses the process boundary) is a dict of fixed-shape numpy arrays plus "meta".
B = batch_size, (H, W) = db.configs["input_size"], M = db.configs["max_objects"],
S = len(db.configs["att_sizes"]):

    "image"        (B, H, W, 3) uint8    BGR augmented crop (scale, crop, resize, flip done)
    "color"        (B, 3, 4)    float32  per-image affine [A | t]: the network input is
                                         A @ [b, g, r] + t per pixel (uint8 values), i.e. the
                                         colour jitter, PCA lighting and (x / 255 - mean) / std
                                         folded together; see `render.normalize_image`
    "boxes"        (B, M, 4)    float32  x1, y1, x2, y2 in output-map coordinates (input
                                         coordinates * output / input size)
    "classes"      (B, M)       int64    0-based class of each box
    "num_objects"  (B,)         int64    objects fill rows [0, num_objects); other rows are 0

cornernet_saccade adds:

    "ignore_boxes"   (B, M, 4) float32  objects that are too small (longest side < min_scale
                                        input pixels) or mostly cut off by the crop (less than
                                        half their area left): the loss ignores the heatmap
                                        under their corner gaussians; output-map coordinates
    "ignore_classes" (B, M)    int64    0-based class of each ignore box
    "num_ignore"     (B,)      int64    ignore boxes fill rows [0, num_ignore)
    "att_cells"      (B, S, M) int64    flat cells y * w + x of attention grid s (size
                                        att_sizes[s]) that hold an object centre; -1 = none

    "meta"  dict: {"skipped": [paths of unreadable images that were passed over],
                   "dropped_objects": objects beyond M that were left out}

Dense targets are rendered from these records on the training device by
`core.sample.render.render_targets`.

Each sampling function declares its batch layout, `sampling_function(name).layout(db.configs)`:
key -> (shape of one image's array, dtype), from which it allocates its batch; `image_bytes` is
what one image takes in a prefetch ring slot (core/data/ring.py), read from that declaration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import lookup
from core.sample.cornernet import (
    Layout,
    cornernet,
    cornernet_batch,
    cornernet_layout,
    cornernet_view,
)
from core.sample.cornernet_saccade import (
    cornernet_saccade,
    cornernet_saccade_batch,
    cornernet_saccade_layout,
    saccade_view,
)
from core.sample.utils import View


@dataclass(frozen=True, eq=False)
class SamplingFunction:
    """One sampling function (`system.sampling_function`).

    Args:
        name: what system.sampling_function names.
        batch: `batch(db, k_ind, batch_size, *, data_aug, strict_images) -> (batch, k_ind)`.
        layout: `layout(db.configs)`: its batch's arrays, key -> (one image's shape, dtype).
        original: the original's call form, `original(system_config, db, k_ind, data_aug)`.
        view: one training view of an image, `view(rng, (H, W), boxes (N, 4), configs)`, as
            its batch draws it (core/data/check.py measures what the crops cut).
        advice: whether the settings advice (core/data/advice.py), which measures random crops
            of the whole image, applies; False where its crops are drawn around objects.
    """

    name: str
    batch: Callable[..., tuple[dict, int]]
    layout: Callable[[dict], Layout]
    original: Callable[..., tuple[dict, int]]
    view: Callable[[np.random.Generator, tuple[int, int], np.ndarray, dict], View]
    advice: bool


def _cornernet_view(rng: np.random.Generator, image_hw: tuple[int, int], boxes: Any,
                    configs: dict) -> View:
    """CornerNet's view: a crop that does not look at the objects (`boxes` is unused)."""
    return cornernet_view(rng, image_hw, configs)


CORNER_SAMPLING = SamplingFunction("cornernet", cornernet_batch, cornernet_layout, cornernet,
                             _cornernet_view, advice=True)
SACCADE_SAMPLING = SamplingFunction("cornernet_saccade", cornernet_saccade_batch,
                                     cornernet_saccade_layout, cornernet_saccade, saccade_view,
                                     advice=False)
sampling_functions: dict[str, SamplingFunction] = {fn.name: fn for fn in (CORNER_SAMPLING,
                                                                          SACCADE_SAMPLING)}
# The original's name and call form: `data_sampling_func[name](system_config, db, k_ind)`.
data_sampling_func = {name: fn.original for name, fn in sampling_functions.items()}


def sampling_function(name: str) -> SamplingFunction:
    """The sampling function `name`; a ConfigError listing the valid names for an unknown one."""
    return lookup(sampling_functions, name, "sampling function")


def image_bytes(configs: dict, name: str) -> int:
    """Bytes one image takes in a batch of sampling function `name`: the sum over its declared
    layout of each array's elements times its item size."""
    layout = sampling_function(name).layout(configs)
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
               for shape, dtype in layout.values())


def sampler(name: str, strict_images: bool = False) -> Callable:
    """The batch of sampling function `name` with strict_images bound: `sample(db, k_ind,
    batch_size, data_aug=)`. Picklable, for the prefetch workers."""
    return functools.partial(sampling_function(name).batch, strict_images=strict_images)


__all__ = ["CORNER_SAMPLING", "SACCADE_SAMPLING", "Layout", "SamplingFunction", "cornernet",
           "cornernet_batch", "cornernet_saccade", "cornernet_saccade_batch", "data_sampling_func",
           "image_bytes", "sampler", "sampling_function", "sampling_functions"]

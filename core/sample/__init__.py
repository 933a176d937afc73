"""Training-sample builders, selected by `system.sampling_function`.

    batch, k_ind = samplers[name](db, k_ind, batch_size, data_aug=True, strict_images=False)

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

Each sampling function declares its batch layout, `layouts[name](db.configs)`: key -> (shape of
one image's array, dtype), from which it allocates its batch; `image_bytes` is what one image
takes in a prefetch ring slot (core/data/ring.py), read from that declaration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from core.errors import lookup
from core.sample.cornernet import Layout, cornernet, cornernet_batch, cornernet_layout
from core.sample.cornernet_saccade import (
    cornernet_saccade,
    cornernet_saccade_batch,
    cornernet_saccade_layout,
)

samplers = {"cornernet": cornernet_batch, "cornernet_saccade": cornernet_saccade_batch}
layouts: dict[str, Callable[[dict], Layout]] = {"cornernet": cornernet_layout,
                                                "cornernet_saccade": cornernet_saccade_layout}
data_sampling_func = {"cornernet": cornernet, "cornernet_saccade": cornernet_saccade}


def image_bytes(configs: dict, name: str) -> int:
    """Bytes one image takes in a batch of sampling function `name`: the sum over its declared
    layout (`layouts`) of each array's elements times its item size."""
    layout = lookup(layouts, name, "sampling function")(configs)
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
               for shape, dtype in layout.values())


def sampler(name: str, strict_images: bool = False) -> Callable:
    """`samplers[name]` with strict_images bound: `sample(db, k_ind, batch_size, data_aug=)`.
    Picklable, for the prefetch workers. An unknown name lists the valid ones."""
    build = lookup(samplers, name, "sampling function")
    return functools.partial(build, strict_images=strict_images)


__all__ = ["Layout", "cornernet", "cornernet_batch", "cornernet_saccade",
           "cornernet_saccade_batch", "data_sampling_func", "image_bytes", "layouts", "sampler",
           "samplers"]

"""Dense training targets and the normalised image, rendered from a compact batch on its device.

The samplers ship uint8 crops and sparse object records (see `core.sample`); this module turns
them into what the losses read, with the original's drawing rules: a corner sits at the integer
part of its output-map coordinate, its offset is the fractional part, its index is y * w + x, and
its heatmap gets a gaussian (sigma = diameter / 6) of radius
`max(0, int(gaussian_radius((ceil(h), ceil(w)), gaussian_iou)))`, merged by element-wise max.
Everything is vectorised over objects and deterministic. On a GPU nothing waits for the device:
every object slot is drawn with a window of a radius no box in the map can exceed (`static_radius`),
the empty slots as zeros, so the result is the same as drawing only the objects.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

from core.sample.utils import gaussian2d, gaussian_radius

# Kernel tables are built for radii up to a power of two (at least this), so that few sizes are
# ever cached per device.
_MIN_TABLE_RADIUS = 16


@functools.lru_cache(maxsize=16)
def _kernel_table(max_radius: int, device: torch.device) -> Tensor:
    """(R + 1, 2R + 1, 2R + 1) float32: gaussian of radius r centred in slice r, zero padded.

    Built with numpy as the original builds its gaussians, then cast, so the values are the same.
    """
    size = 2 * max_radius + 1
    table = torch.zeros(max_radius + 1, size, size, dtype=torch.float32)
    for radius in range(max_radius + 1):
        lo = max_radius - radius
        table[radius, lo:lo + 2 * radius + 1, lo:lo + 2 * radius + 1] = torch.from_numpy(
            gaussian2d(radius))
    return table.to(device)


def _radii(boxes: Tensor, db_configs: dict) -> Tensor:
    """(...) int64 gaussian radius of each box (..., 4) in output-map coordinates."""
    shape = boxes.shape[:-1]
    if not db_configs["gaussian_bump"]:
        return torch.zeros(shape, dtype=torch.int64, device=boxes.device)
    if db_configs["gaussian_radius"] >= 0:
        return torch.full(shape, db_configs["gaussian_radius"], dtype=torch.int64,
                          device=boxes.device)
    width = torch.ceil(boxes[..., 2] - boxes[..., 0]).double()
    height = torch.ceil(boxes[..., 3] - boxes[..., 1]).double()
    radius = gaussian_radius(height, width, db_configs["gaussian_iou"], xp=torch)
    return radius.to(torch.int64).clamp(min=0)


@functools.lru_cache(maxsize=16)
def static_radius(height: int, width: int, gaussian_iou: float) -> int:
    """The largest corner radius of a box inside an output map of `height` x `width` (its sides,
    rounded up, at most the map's plus one for rounding): the window every slot is drawn with
    when the radii are not read back from the device."""
    h, w = np.meshgrid(np.arange(height + 2.0), np.arange(width + 2.0), indexing="ij")
    return max(0, int(gaussian_radius(h, w, gaussian_iou).max()))


def _radius_bound(db_configs: dict) -> int:
    if not db_configs["gaussian_bump"]:
        return 0
    if db_configs["gaussian_radius"] >= 0:
        return db_configs["gaussian_radius"]
    height, width = db_configs["output_sizes"][0]
    return static_radius(height, width, db_configs["gaussian_iou"])


def _draw(heat: Tensor, valid: Tensor, classes: Tensor, xs: Tensor, ys: Tensor,
          radii: Tensor, bound: int | None) -> None:
    """Draw gaussians into `heat` (B, C, h, w) by element-wise max at corners (xs, ys) (B, M)
    int64 for the objects where `valid` (B, M) bool, of class `classes`, radius `radii`.

    bound None: only the valid objects, in a window of the largest radius among them (both read
    back from the device). An int: every slot, in a window of that radius (radii are clamped to
    it; boxes inside the map never exceed `_radius_bound`), empty slots drawing zeros.
    """
    _, categories, height, width = heat.shape
    if bound is None:
        batch_ind, slot = valid.nonzero(as_tuple=True)
        if batch_ind.numel() == 0:
            return
        radius = radii[batch_ind, slot]
        max_radius = int(radius.max())
        weight = None
    else:
        batch_ind, slot = (i.reshape(-1) for i in torch.meshgrid(
            torch.arange(valid.shape[0], device=heat.device),
            torch.arange(valid.shape[1], device=heat.device), indexing="ij"))
        radius = radii.reshape(-1).clamp(0, bound)
        max_radius = bound
        weight = valid.reshape(-1, 1, 1)
        classes = torch.where(valid, classes, 0)
    table_radius = max(_MIN_TABLE_RADIUS, 1 << max(max_radius, 1).bit_length())
    lo = table_radius - max_radius
    window = _kernel_table(table_radius, heat.device)[
        :, lo:lo + 2 * max_radius + 1, lo:lo + 2 * max_radius + 1]
    values = window[radius] if weight is None else window[radius] * weight
    steps = torch.arange(-max_radius, max_radius + 1, device=heat.device)
    y = ys[batch_ind, slot][:, None, None] + steps[None, :, None]
    x = xs[batch_ind, slot][:, None, None] + steps[None, None, :]
    inside = (y >= 0) & (y < height) & (x >= 0) & (x < width)
    plane = (batch_ind * categories + classes[batch_ind, slot])[:, None, None]
    # Pixels outside the map add a 0 at a clamped (real) pixel: a no-op on a map that is >= 0.
    flat = (plane * height + y.clamp(0, height - 1)) * width + x.clamp(0, width - 1)
    heat.view(-1).scatter_reduce_(0, flat.reshape(-1), (values * inside).reshape(-1), "amax")


def _corner_targets(boxes: Tensor, classes: Tensor, count: Tensor, db_configs: dict,
                    categories: int, static: bool) -> tuple[Tensor, ...]:
    """Heatmaps, offsets and indices of both corners for the first `count` boxes of each image
    (`static`: see `_draw`'s bound)."""
    batch, slots = classes.shape
    height, width = db_configs["output_sizes"][0]
    valid = torch.arange(slots, device=boxes.device)[None, :] < count[:, None]
    corners = torch.trunc(boxes)
    offsets = torch.where(valid[..., None], boxes - corners, 0)
    ints = torch.where(valid[..., None], corners.to(torch.int64), 0)
    radii = _radii(boxes, db_configs)
    bound = _radius_bound(db_configs) if static else None
    heats = []
    for x, y in ((ints[..., 0], ints[..., 1]), (ints[..., 2], ints[..., 3])):
        heat = torch.zeros(batch, categories, height, width, device=boxes.device)
        _draw(heat, valid, classes, x, y, radii, bound)
        heats.append(heat)
    index = ints[..., 1::2] * width + ints[..., 0::2]
    return (heats[0], heats[1], valid.to(torch.uint8), offsets[..., 0:2].contiguous(),
            offsets[..., 2:4].contiguous(), index[..., 0].contiguous(),
            index[..., 1].contiguous())


def render_targets(batch: dict[str, Tensor], db_configs: dict, categories: int,
                   static: bool | None = None) -> list[Tensor | list[Tensor]]:
    """The loss targets of a compact batch, on the device of its tensors.

    `static` draws with a window fixed by the config instead of one read back from the device
    (the same targets; by default on a GPU, where reading back waits for the device).

    CornerNet (7): gt_tl_heat, gt_br_heat (B, C, h, w) float32; gt_mask (B, M) uint8;
    gt_tl_off, gt_br_off (B, M, 2) float32; gt_tl_ind, gt_br_ind (B, M) int64.
    Saccade (batch has "ignore_boxes") adds: gt_tl_valid, gt_br_valid (B, C, h, w) float32, 0
    under the corner gaussians of the ignore boxes (per class, as the original) and 1 elsewhere;
    gt_atts, a list over attention scales of (B, 1, a_h, a_w) float32, 1 at object centres.
    """
    if static is None:
        static = batch["boxes"].device.type != "cpu"
    targets = list(_corner_targets(batch["boxes"], batch["classes"], batch["num_objects"],
                                   db_configs, categories, static))
    if "ignore_boxes" not in batch:
        return targets
    ignored = _corner_targets(batch["ignore_boxes"], batch["ignore_classes"],
                              batch["num_ignore"], db_configs, categories, static)
    targets += [(ignored[0] == 0).float(), (ignored[1] == 0).float()]
    cells = batch["att_cells"]
    atts = []
    for scale, (att_h, att_w) in enumerate(db_configs["att_sizes"]):
        att = torch.zeros(cells.shape[0], att_h * att_w, device=cells.device)
        present = cells[:, scale] >= 0
        att.scatter_reduce_(1, cells[:, scale].clamp(min=0), present.float(), "amax")
        atts.append(att.view(-1, 1, att_h, att_w))
    targets.append(atts)
    return targets


def normalize_image(image: Tensor, color: Tensor) -> Tensor:
    """(B, 3, H, W) float32 network input from `image` (B, H, W, 3) uint8 BGR and the colour
    affine `color` (B, 3, 4) [A | t]: out[:, c] = sum_k A[:, c, k] * image[..., k] + t[:, c]."""
    pixels = image.permute(0, 3, 1, 2).float()
    matrix = color[:, :, :3, None, None]
    out = color[:, :, 3, None, None] + matrix[:, :, 0] * pixels[:, 0:1]
    out = out + matrix[:, :, 1] * pixels[:, 1:2]
    return out + matrix[:, :, 2] * pixels[:, 2:3]

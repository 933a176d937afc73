"""CornerNet-Saccade inference on one image: a downsized look, then zoomed crops where it matters.

1. The whole image, downsized so its longer side is each of `init_sizes`, goes through the network,
   which returns detections and attention maps (one per level, strides `att_ratios`).
2. Attention peaks above the threshold become locations (y, x, zoom) in image pixels; with
   `ref_dets`, the centres of confident detections are added, zoomed so the object gets a
   standard size; nearby locations of similar zoom are merged (`location_nms`).
3. Up to `att_max_crops` crops of `input_size` around the locations, at their zoom, go through the
   network; detections touching a crop's border are rejected by the decoder (`no_border`), the
   rest are mapped back to the image. With more than one entry in `att_thresholds`, the crops'
   attention maps give the next round of locations.
4. All detections: per-class soft-NMS (gaussian sigma 0.7) and the `max_per_image` cut.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from .cornernet import in_weights_layout, nms_config, per_class_nms

if TYPE_CHECKING:
    from core.dbs.detection import DETECTION

    from .protocol import Network

DECODE_BATCH = 32
# Crops are never zoomed in beyond this, nor from locations already zoomed beyond MAX_SOURCE_ZOOM.
MAX_ZOOM, MAX_SOURCE_ZOOM = 4, 2
# Objects re-detected from a confident detection are zoomed to these sizes (pixels), by size band.
REF_BANDS = ((96, 192), (32, 64), (0, 24))


def crop_and_resize(image: torch.Tensor, center: tuple[int, int], size: tuple[int, int],
                    out: torch.Tensor) -> np.ndarray:
    """Paste the `size` window of `image` around `center`, resized, into the centre of `out`.

    Args:
        image: (3, H, W) float.
        center: (y, x) integer pixel of the window's centre.
        size: (h, w) window size in image pixels; the zoom is `out height / max(h, w)`.
        out: (3, oh, ow) float, written in place; parts of the window outside the image stay as
            they are (zero).

    Returns:
        (2,) float32 [y, x], the image coordinates of the window's top-left corner: a point at
        `p` on `out` is at `p / zoom + offset` in the image.
    """
    cty, ctx = center
    height, width = size
    out_h, out_w = out.shape[1:]
    im_h, im_w = image.shape[1:]
    zoom = out_h / max(height, width)
    x0, x1 = max(0, ctx - width // 2), min(ctx + width // 2, im_w)
    y0, y1 = max(0, cty - height // 2), min(cty + height // 2, im_h)
    oy0, oy1 = out_h // 2 - int((cty - y0) * zoom), out_h // 2 + int((y1 - cty) * zoom)
    ox0, ox1 = out_w // 2 - int((ctx - x0) * zoom), out_w // 2 + int((x1 - ctx) * zoom)
    if oy1 > oy0 and ox1 > ox0 and y1 > y0 and x1 > x0:
        out[:, oy0:oy1, ox0:ox1] = F.interpolate(
            image[None, :, y0:y1, x0:x1], size=(oy1 - oy0, ox1 - ox0), mode="bilinear",
            align_corners=False)[0]
    return np.array([cty - height // 2, ctx - width // 2], dtype=np.float32)


def prepare_crops(db: DETECTION, image: torch.Tensor, locations: np.ndarray
                  ) -> tuple[torch.Tensor, np.ndarray]:
    """Normalised network inputs for `locations` (L, >=3) rows [y, x, zoom, ...].

    Returns:
        crops (L, 3, in_h, in_w) float32 on the image's device, normalised as in training;
        offsets (L, 2) float32 [y, x] of each crop's top-left corner in the image.
    """
    in_h, in_w = db.configs["input_size"]
    crops = torch.zeros((len(locations), 3, in_h, in_w), device=image.device)
    offsets = np.zeros((len(locations), 2), dtype=np.float32)
    for k, (y, x, zoom) in enumerate(locations[:, :3]):
        offsets[k] = crop_and_resize(image, (int(y), int(x)), (int(in_h / zoom), int(in_w / zoom)),
                                     crops[k])
    mean = torch.as_tensor(db.mean, device=image.device).view(1, 3, 1, 1)
    std = torch.as_tensor(db.std, device=image.device).view(1, 3, 1, 1)
    return (crops - mean) / std, offsets


def run_network(db: DETECTION, nnet: Network, crops: torch.Tensor, with_att: bool
                ) -> tuple[np.ndarray, list[np.ndarray]]:
    """Detections and local-maximum attention maps of `crops` (L, 3, h, w), in batches.

    Returns:
        dets (L, num_dets, 8) float32 in output-map coordinates (border pairs rejected);
        atts: per level (L, 1, h_j, w_j) float32, non-maxima zeroed (empty when not `with_att`).
    """
    cfg = db.configs
    kwargs = {"K": cfg["top_k"], "kernel": cfg["nms_kernel"], "ae_threshold": cfg["ae_threshold"],
              "num_dets": cfg["num_dets"], "no_border": True, "no_att": not with_att}
    dets, atts = [], []
    for start in range(0, len(crops), DECODE_BATCH):
        outputs = nnet.test(in_weights_layout(crops[start:start + DECODE_BATCH], nnet), **kwargs)
        batch_dets, batch_atts = outputs if with_att else (outputs, [])
        dets.append(batch_dets.float().cpu().numpy())
        atts.append([_local_maxima(att, k).float().cpu().numpy()
                     for att, k in zip(batch_atts, cfg["att_nms_ks"])])
    levels = [np.concatenate(level, axis=0) for level in zip(*atts)]
    return np.concatenate(dets, axis=0), levels


def _local_maxima(att: torch.Tensor, kernel: int) -> torch.Tensor:
    pooled = F.max_pool2d(att, kernel, stride=1, padding=(kernel - 1) // 2)
    return att * (att == pooled)


def map_crop_dets(db: DETECTION, dets: np.ndarray, zooms: np.ndarray, offsets: np.ndarray,
                  image_hw: tuple[int, int]) -> np.ndarray:
    """Crop detections (L, N, 8) in output-map coordinates to image pixels, clipped.

    Returns:
        (L * N, 8) float32; out-of-map-to-input ratio undone, divided by each crop's zoom,
        shifted by its offset.
    """
    (in_h, in_w), (out_h, out_w) = db.configs["input_size"], db.configs["output_sizes"][0]
    dets = dets.copy()
    dets[..., 0:4:2] *= in_w / out_w
    dets[..., 1:4:2] *= in_h / out_h
    dets[..., 0:4] /= zooms.reshape(-1, 1, 1)
    dets[..., 0:4:2] += offsets[:, 1].reshape(-1, 1, 1)
    dets[..., 1:4:2] += offsets[:, 0].reshape(-1, 1, 1)
    np.clip(dets[..., 0:4:2], 0, image_hw[1], out=dets[..., 0:4:2])
    np.clip(dets[..., 1:4:2], 0, image_hw[0], out=dets[..., 1:4:2])
    return dets.reshape(-1, 8)


def attention_locations(db: DETECTION, atts: list[np.ndarray], att_scales: list, zooms: np.ndarray,
                        offsets: np.ndarray, image_hw: tuple[int, int], thresh: float,
                        ignore_same: bool = False) -> np.ndarray:
    """Attention peaks above `thresh` as (M, 4) float rows [y, x, zoom, score] in image pixels.

    Level j of crop k (stride `att_ratios[j]`) proposes its peaks zoomed by `att_scales[j]` times
    the crop's zoom; crops already zoomed beyond 2, zooms beyond 4 and, with `ignore_same`,
    levels that would not zoom further (att_scale <= 1) propose nothing.
    """
    rows = []
    for k in range(len(zooms)):
        for att, ratio, att_scale in zip(atts, db.configs["att_ratios"], att_scales):
            next_zoom = att_scale * zooms[k]
            if (ignore_same and att_scale <= 1) or zooms[k] > MAX_SOURCE_ZOOM \
                    or next_zoom > MAX_ZOOM:
                continue
            ys, xs = np.nonzero(att[k, 0] > thresh)
            scores = att[k, 0, ys, xs]
            ys = ys * ratio / zooms[k] + offsets[k, 0]
            xs = xs * ratio / zooms[k] + offsets[k, 1]
            inside = (ys >= 0) & (ys < image_hw[0]) & (xs >= 0) & (xs < image_hw[1])
            rows.append(np.stack([ys, xs, np.full_like(ys, next_zoom), scores], 1)[inside])
    return np.concatenate(rows, axis=0) if rows else np.zeros((0, 4))


def reference_locations(dets: np.ndarray) -> np.ndarray:
    """Centres of detections scoring above 0.5 as (M, 4) rows [y, x, zoom, 1].

    Boxes of zero size (clipped away outside the image) are skipped. The zoom brings the longer
    side to 192 px for objects over 96 px, 64 px for 32-96 px and 24 px for smaller ones; the
    score 1 puts these locations first in `location_nms`.
    """
    sides = np.maximum(dets[:, 2] - dets[:, 0], dets[:, 3] - dets[:, 1])
    chosen = (dets[:, 4] > 0.5) & (sides > 0)
    dets, sides = dets[chosen], sides[chosen]
    zooms = np.zeros_like(sides)
    for low, target in REF_BANDS:
        band = (sides > low) & (zooms == 0)
        zooms[band] = target / sides[band]
    centres = np.stack([(dets[:, 1] + dets[:, 3]) / 2, (dets[:, 0] + dets[:, 2]) / 2], 1)
    return np.concatenate([centres, zooms[:, None], np.ones((len(dets), 1))], 1)


def location_nms(locations: np.ndarray, thresh: float = 16) -> np.ndarray:
    """Greedy merging of locations (M, 4) [y, x, zoom, score], best score first.

    A location is dropped when a better one has a similar zoom (ratio within [0.8, 1.2]) and lies
    within `thresh / zoom` pixels of it along x or along y (the original's min(|dy|, |dx|)).
    """
    order = np.argsort(-locations[:, 3], kind="stable")
    locations = locations[order]
    ys, xs, zooms = locations[:, 0], locations[:, 1], locations[:, 2]
    dists = np.minimum(np.abs(ys[:, None] - ys[None]), np.abs(xs[:, None] - xs[None]))
    ratios = zooms[:, None] / zooms[None]
    alive = np.arange(len(locations))
    kept = []
    while alive.size:
        first = alive[0]
        kept.append(first)
        far = (dists[first, alive] > thresh / zooms[first]) | (ratios[first, alive] > 1.2) \
            | (ratios[first, alive] < 0.8)
        alive = alive[far]
    return locations[kept] if kept else np.zeros((0, 4))


def _next_locations(db: DETECTION, atts: list[np.ndarray], att_scales: list, zooms: np.ndarray,
                    offsets: np.ndarray, image_hw: tuple[int, int], thresh: float,
                    dets: np.ndarray, ignore_same: bool) -> np.ndarray:
    locations = attention_locations(db, atts, att_scales, zooms, offsets, image_hw, thresh,
                                    ignore_same)
    if db.configs["ref_dets"]:
        locations = location_nms(np.concatenate([locations, reference_locations(dets)]))
    return locations


def cornernet_saccade_inference(db: DETECTION, nnet: Network, image: np.ndarray
                                ) -> dict[int, np.ndarray]:
    """Detect objects in one image with a CornerNet-Saccade network.

    Args:
        db: dataset with `configs` (init_sizes, ref_dets, att_* keys, input_size, output_sizes,
            top_k, ae_threshold, nms_kernel, num_dets, categories, nms_threshold, nms_algorithm,
            max_per_image), `mean`, `std`.
        nnet: NetworkFactory-like with `device` and `test(images, **kwargs)`, which returns
            (detections, attention maps), or detections only with `no_att=True`.
        image: (H, W, 3) uint8 BGR.

    Returns:
        {cls 1..C: (n, 5) float32 [x1, y1, x2, y2, score]} in image pixels.
    """
    cfg = db.configs
    thresholds, att_scales = cfg["att_thresholds"], cfg["att_scales"]
    image_hw = image.shape[:2]
    pixels = torch.from_numpy(np.ascontiguousarray(image)).to(nnet.device)
    pixels = pixels.permute(2, 0, 1).float() / 255

    height, width = image_hw
    locations = np.array([[height // 2, width // 2, size / max(height, width)]
                          for size in cfg["init_sizes"]], dtype=np.float32)
    crops, offsets = prepare_crops(db, pixels, locations)
    dets, atts = run_network(db, nnet, crops, with_att=True)
    dets = map_crop_dets(db, dets, locations[:, 2], offsets, image_hw)
    dets = dets[dets[:, 4] > 0.3]
    all_dets = [dets]
    locations = _next_locations(db, atts, att_scales[0], locations[:, 2], offsets, image_hw,
                                thresholds[0], dets, ignore_same=False)

    num_crops = 0
    for step in range(1, len(thresholds) + 1):
        locations = locations[:cfg["att_max_crops"] - num_crops]
        if len(locations) == 0:
            break
        num_crops += len(locations)
        last = step == len(thresholds)
        crops, offsets = prepare_crops(db, pixels, locations)
        dets, atts = run_network(db, nnet, crops, with_att=not last)
        dets = map_crop_dets(db, dets, locations[:, 2], offsets, image_hw)
        dets = dets[dets[:, 4] > -1]
        all_dets.append(dets)
        if last or num_crops >= cfg["att_max_crops"]:
            break
        locations = _next_locations(db, atts, att_scales[step], locations[:, 2], offsets,
                                    image_hw, thresholds[step], dets, ignore_same=True)

    return per_class_nms(np.concatenate(all_dets, axis=0), cfg["categories"],
                         cfg["max_per_image"], sigma=0.7, **nms_config(cfg))


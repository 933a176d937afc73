"""Pieces shared by the samplers and the renderer: gaussian radius and kernel, crop geometry,
and the colour jitter folded into one per-image affine map.

Geometry convention: box coordinates are continuous pixel-corner coordinates, as in the original
(a box edge at x maps to `a * x + b`); pixels follow cv2.resize's half-pixel-centre convention, so
both agree on where the content lands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

# cv2's BGR -> gray weights for float images, in BGR order.
GRAY_WEIGHTS = np.array([0.114, 0.587, 0.299])
# The original's colour jitter: strength of each factor and of the PCA lighting noise.
JITTER_VAR = 0.4
LIGHTING_STD = 0.1
BRIGHTNESS, CONTRAST, SATURATION = 0, 1, 2


def gaussian_radius(height: Any, width: Any, min_overlap: float, xp: Any = np) -> Any:
    """The original's corner radius for a box of `height` x `width` output pixels.

    Works on python/numpy scalars (`xp=np`) and on float64 tensors (`xp=torch`) with the same
    operations in the same order, so both give bitwise equal radii.
    """
    b1 = height + width
    c1 = width * height * (1 - min_overlap) / (1 + min_overlap)
    r1 = (b1 - xp.sqrt(b1 * b1 - 4 * c1)) / 2

    b2 = 2 * (height + width)
    c2 = (1 - min_overlap) * width * height
    r2 = (b2 - xp.sqrt(b2 * b2 - 16 * c2)) / 8

    a3 = 4 * min_overlap
    b3 = -2 * min_overlap * (height + width)
    c3 = (min_overlap - 1) * width * height
    r3 = (b3 + xp.sqrt(b3 * b3 - 4 * a3 * c3)) / (2 * a3)
    return xp.minimum(xp.minimum(r1, r2), r3)


def gaussian2d(radius: int) -> np.ndarray:
    """(2r+1, 2r+1) float64 gaussian with sigma = diameter / 6, negligible tails set to 0."""
    diameter = 2 * radius + 1
    sigma = diameter / 6
    y, x = np.ogrid[-radius:radius + 1, -radius:radius + 1]
    kernel = np.exp(-(x * x + y * y) / (2 * sigma * sigma))
    kernel[kernel < np.finfo(kernel.dtype).eps * kernel.max()] = 0
    return kernel


def get_border(border: int, size: int) -> int:
    """The largest `border / 2**i` that leaves room for a crop centre in an image of `size`."""
    i = 1
    while size - border // i <= border // i:
        i *= 2
    return border // i


@dataclass(frozen=True)
class View:
    """Where the source image lands in the network input, before flipping.

    A source point (x, y) maps to (scale[1] * x + shift[1], scale[0] * y + shift[0]); only the
    source region `src_box` = (x0, y0, x1, y1) (integers) carries content, the rest is zero.
    """

    scale: tuple[float, float]
    shift: tuple[float, float]
    src_box: tuple[int, int, int, int]
    flip: bool = False


@dataclass(frozen=True)
class Placement:
    """What `render_view` really did: source box `a * x + b` per axis ((x, y) order), the
    output region (x0, y0, x1, y1) that holds content, and whether it was flipped afterwards."""

    a: np.ndarray
    b: np.ndarray
    region: tuple[int, int, int, int]
    flip: bool


def _span(a: float, b: float, s0: int, s1: int, out_len: int) -> tuple[int, int, int, int]:
    """Integer source span [x0, x1) and its output span [u0, u1) for x_out = a * x + b."""
    x0 = max(s0, math.floor(-b / a))
    x1 = min(s1, math.ceil((out_len - b) / a))
    return x0, x1, round(a * x0 + b), round(a * x1 + b)


def whole_view(image_hw: tuple[int, int], input_size: list[int]) -> View:
    """The whole image stretched to the input size (the original's non-augmented path)."""
    height, width = image_hw
    return View((input_size[0] / height, input_size[1] / width), (0.0, 0.0),
                (0, 0, width, height))


def render_view(image: np.ndarray, view: View, out: np.ndarray) -> Placement:
    """Write the view of `image` (H, W, 3) uint8 into `out` (h, w, 3) uint8, zero elsewhere.

    Only the needed source region is resized (one cv2.resize, straight into `out` when it fits);
    integer source and output spans are chosen first, so the returned placement is exactly the
    map the pixels follow.
    """
    out_h, out_w = out.shape[:2]
    sx0, sy0, sx1, sy1 = view.src_box
    x0, x1, u0, u1 = _span(view.scale[1], view.shift[1], sx0, sx1, out_w)
    y0, y1, v0, v1 = _span(view.scale[0], view.shift[0], sy0, sy1, out_h)
    if x1 <= x0 or y1 <= y0 or u1 <= u0 or v1 <= v0:
        out[:] = 0
        return Placement(np.ones(2), np.zeros(2), (0, 0, 0, 0), view.flip)
    cu0, cu1, cv0, cv1 = max(u0, 0), min(u1, out_w), max(v0, 0), min(v1, out_h)
    col0, col1 = (out_w - cu1, out_w - cu0) if view.flip else (cu0, cu1)
    out[:cv0] = 0
    out[cv1:] = 0
    out[cv0:cv1, :col0] = 0
    out[cv0:cv1, col1:] = 0
    content = out[cv0:cv1, col0:col1]
    roi, size = image[y0:y1, x0:x1], (u1 - u0, v1 - v0)
    if (u0, v0, u1, v1) == (cu0, cv0, cu1, cv1) and not view.flip:
        cv2.resize(roi, size, dst=content, interpolation=cv2.INTER_LINEAR)
    else:
        resized = cv2.resize(roi, size, interpolation=cv2.INTER_LINEAR)
        piece = resized[cv0 - v0:cv1 - v0, cu0 - u0:cu1 - u0]
        if view.flip:
            cv2.flip(piece, 1, dst=content)
        else:
            content[:] = piece
    a = np.array([(u1 - u0) / (x1 - x0), (v1 - v0) / (y1 - y0)])
    b = np.array([u0, v0]) - np.array([x0, y0]) * a
    return Placement(a, b, (cu0, cv0, cu1, cv1), view.flip)


def place_boxes(boxes: np.ndarray, placement: Placement, clip: tuple[int, int, int, int],
                out_width: int) -> tuple[np.ndarray, np.ndarray]:
    """Map source boxes (N, 4) x1,y1,x2,y2 into the output, clip them to `clip` = (x0, y0, x1,
    y1) (last pixel x1 - 1 included) and flip them with the image.

    Returns the (K, 4) float64 boxes that keep a positive size and their (K,) int64 row indices.
    """
    mapped = boxes[:, :4].astype(np.float64) * np.tile(placement.a, 2) + np.tile(placement.b, 2)
    np.clip(mapped[:, 0::2], clip[0], clip[2] - 1, out=mapped[:, 0::2])
    np.clip(mapped[:, 1::2], clip[1], clip[3] - 1, out=mapped[:, 1::2])
    keep = np.flatnonzero((mapped[:, 2] > mapped[:, 0]) & (mapped[:, 3] > mapped[:, 1]))
    mapped = mapped[keep]
    if placement.flip:
        mapped[:, [0, 2]] = out_width - 1 - mapped[:, [2, 0]]
    return mapped, keep


@dataclass(frozen=True)
class ColorJitter:
    """One image's colour jitter: `factors[i]` is the factor of operation `order[i]`
    (BRIGHTNESS, CONTRAST or SATURATION), applied in that order; then PCA lighting with
    coefficients `lighting` (3,) (zeros: no lighting)."""

    order: tuple[int, ...]
    factors: tuple[float, ...]
    lighting: np.ndarray


def draw_color_jitter(rng: np.random.Generator, lighting: bool) -> ColorJitter:
    """Draw the original's jitter: the three operations in random order, each with a factor
    uniform in [1 - 0.4, 1 + 0.4), then (if `lighting`) normal(0, 0.1) PCA coefficients."""
    order = tuple(int(op) for op in rng.permutation(3))
    factors = tuple(float(1.0 + rng.uniform(-JITTER_VAR, JITTER_VAR)) for _ in order)
    light = rng.normal(scale=LIGHTING_STD, size=3) if lighting else np.zeros(3)
    return ColorJitter(order, factors, light)


def color_affine(jitter: ColorJitter | None, channel_means: np.ndarray, db: Any) -> np.ndarray:
    """(3, 4) float32 [A | t]: normalised BGR input = A @ (uint8 BGR pixel) + t.

    Composes the jitter as the original applies it to the float image x = pixel / 255 (gray and
    its mean taken once, before any operation), the lighting shift `eig_vec @ (eig_val * alpha)`,
    and `(x - db.mean) / db.std`. `channel_means` (3,) are the crop's uint8 BGR channel means;
    the mean of the gray image is their weighted sum. `jitter` None: normalisation only.
    """
    linear = np.eye(3)
    shift = np.zeros(3)
    if jitter is not None:
        gray_mean = float(GRAY_WEIGHTS @ channel_means) / 255
        for op, factor in zip(jitter.order, jitter.factors):
            linear = factor * linear
            shift = factor * shift
            if op == CONTRAST:
                shift = shift + (1 - factor) * gray_mean
            elif op == SATURATION:
                linear = linear + (1 - factor) * GRAY_WEIGHTS[None, :]
        shift = shift + np.asarray(db.eig_vec, np.float64) @ (
            np.asarray(db.eig_val, np.float64) * jitter.lighting)
    std = np.asarray(db.std, np.float64)
    linear = linear / 255 / std[:, None]
    shift = (shift - np.asarray(db.mean, np.float64)) / std
    return np.concatenate([linear, shift[:, None]], axis=1).astype(np.float32)

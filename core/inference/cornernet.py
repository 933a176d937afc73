"""CornerNet and CornerNet-Squeeze inference on one image: scales, flip, mapping back, soft-NMS.

For each test scale the image is resized, placed at the centre of a zero canvas whose sides are
`side | 127` (so `side + 1` is a multiple of 128 and every hourglass level has an integer size),
normalised and run through the network, with its mirror image in the same batch when
`test_flipped`. Detections come back in output-map coordinates and are mapped to the original
image: divided by the map/input ratio, shifted by the canvas border, clipped to the resized image
and divided by the scale. Then per class (soft-)NMS and the `max_per_image` cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
import torch

from ..models.fit import config_stride, output_side
from .buckets import bucket_of, canvas_buckets, paste
from .soft_nms import soft_nms
from .timing import StageTimer

if TYPE_CHECKING:
    from core.dbs.detection import DETECTION

    from .protocol import Network

# Every input side is `k * 128 - 1`, as in the original (crop_image to `side | 127`).
GRID_MASK = 127


def network_input(images: np.ndarray, mean: np.ndarray, std: np.ndarray,
                  device: torch.device | str) -> torch.Tensor:
    """Normalise a uint8 batch on `device`.

    Args:
        images: (B, H, W, 3) uint8 BGR.
        mean, std: (3,) float32 BGR, in units of 1/255 of the pixel range.
        device: where the network runs; on a GPU the uint8 batch travels and the float one is
            made there, on the CPU a 256-entry table per channel maps the pixels.

    Returns:
        (B, 3, H, W) float32 `(images / 255 - mean) / std` on `device`, in channels-last
        memory layout (strides of the (B, H, W, 3) array).
    """
    mean_t = torch.as_tensor(mean, dtype=torch.float32)
    std_t = torch.as_tensor(std, dtype=torch.float32)
    if torch.device(device).type == "cpu":
        # Every value is one of 256 per channel: computed once, elementwise exactly as below.
        table = ((torch.arange(256, dtype=torch.float32)[:, None] / 255 - mean_t) / std_t)
        batch, height, width, _ = images.shape
        pixels = cv2.LUT(np.ascontiguousarray(images).reshape(batch * height, width, 3),
                         table.numpy()[None])
        return torch.from_numpy(pixels.reshape(images.shape)).permute(0, 3, 1, 2)
    batch = torch.from_numpy(np.ascontiguousarray(images)).to(device).permute(0, 3, 1, 2)
    mean_t = mean_t.to(batch.device).view(1, 3, 1, 1)
    std_t = std_t.to(batch.device).view(1, 3, 1, 1)
    return (batch.float() / 255 - mean_t) / std_t


def weights_layout(model: torch.nn.Module) -> torch.memory_format:
    """`torch.channels_last` when `model`'s convolution weights are stored channels-last
    (`model.to(memory_format=torch.channels_last)`), else `torch.contiguous_format` (NCHW)."""
    for weight in model.parameters():
        # A 1x1 kernel's weight is contiguous in both layouts: only a wider one tells.
        if weight.dim() == 4 and weight.shape[2] * weight.shape[3] > 1:
            if weight.is_contiguous():
                return torch.contiguous_format
            if weight.is_contiguous(memory_format=torch.channels_last):
                return torch.channels_last
    return torch.contiguous_format


def in_weights_layout(batch: torch.Tensor, nnet: Network) -> torch.Tensor:
    """`batch` (B, 3, H, W) in the memory layout of `nnet`'s weights, off the CPU.

    On a GPU, a channels-last input to NCHW weights sends the depthwise and transposed
    convolutions to cuDNN's channels-last kernels and makes every activation channels-last:
    the input follows the weights instead. On the CPU the batch stays as it is made (CornerNet's
    channels-last from the pixel table, which oneDNN runs as fast as NCHW in float32 and ten
    times faster in bf16), and so does a runtime other than torch.
    """
    model = getattr(nnet, "model", None)
    model = getattr(model, "module", model)
    if batch.device.type == "cpu" or not isinstance(model, torch.nn.Module):
        return batch
    return batch.contiguous(memory_format=weights_layout(model))


def resize_and_pad(image: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Resize by `scale` and centre on a zero canvas of sides `side | 127`.

    Args:
        image: (H, W, 3) uint8.

    Returns:
        canvas: (h | 127, w | 127, 3) uint8 with h, w = int(H * scale), int(W * scale);
        border: (2,) float32 [top, left], where the resized image starts on the canvas;
        size: (2,) float32 [h, w], the resized image's size.
    """
    height, width = image.shape[:2]
    new_h, new_w = int(height * scale), int(width * scale)
    inp_h, inp_w = new_h | GRID_MASK, new_w | GRID_MASK
    resized = cv2.resize(image, (new_w, new_h))
    top, left = inp_h // 2 - new_h // 2, inp_w // 2 - new_w // 2
    canvas = np.zeros((inp_h, inp_w, 3), dtype=np.uint8)
    canvas[top:top + new_h, left:left + new_w] = resized
    return (canvas, np.array([top, left], dtype=np.float32),
            np.array([new_h, new_w], dtype=np.float32))


def output_size(input_hw: tuple[int, int], db_configs: dict) -> tuple[int, int]:
    """Output-map size for an input of `input_hw` by the model's size rule, at the stride of
    the checked config (511 -> 128 is stride 4, 511 -> 64 stride 8)."""
    stride = config_stride(db_configs)
    return output_side(input_hw[0], stride), output_side(input_hw[1], stride)


def flip_back(dets: np.ndarray, out_width: int) -> np.ndarray:
    """Mirror detections of a horizontally flipped input back: x -> out_width - x.

    Args:
        dets: (N, 8) float32 rows `[x1, y1, x2, y2, score, tl, br, cls]` on the flipped map.
        out_width: width of the output map.

    Returns:
        (N, 8) float32 copy with x1, x2 mirrored and swapped so that x1 <= x2 stays true.
    """
    dets = dets.copy()
    dets[:, [0, 2]] = out_width - dets[:, [2, 0]]
    return dets


def map_to_image(dets: np.ndarray, ratios: np.ndarray, border: np.ndarray, size: np.ndarray,
                 scale: float) -> np.ndarray:
    """Output-map detections to original-image coordinates, in place.

    Args:
        dets: (N, 8) float32 rows `[x1, y1, x2, y2, score, tl, br, cls]`, modified in place.
        ratios: (2,) [out_h / inp_h, out_w / inp_w].
        border: (2,) [top, left] of the resized image on the canvas.
        size: (2,) [h, w] of the resized image.
        scale: the test scale the image was resized by.

    Returns:
        `dets`, boxes clipped to the image; boxes lying wholly outside it (in the padding) get
        score -1, the mark of a rejected pair.
    """
    xs, ys = dets[:, 0:4:2], dets[:, 1:4:2]
    xs /= ratios[1]
    ys /= ratios[0]
    xs -= border[1]
    ys -= border[0]
    outside = (xs[:, 1] <= 0) | (xs[:, 0] >= size[1]) | (ys[:, 1] <= 0) | (ys[:, 0] >= size[0])
    dets[outside, 4] = -1
    np.clip(xs, 0, size[1], out=xs)
    np.clip(ys, 0, size[0], out=ys)
    dets[:, 0:4] /= scale
    return dets


def nms_config(configs: dict) -> dict[str, Any]:
    """The soft_nms keyword arguments selected by a db config (merge only with merge_bbox)."""
    return {
        "method": configs["nms_algorithm"],
        "nms_threshold": configs["nms_threshold"],
        "weight_exp": configs["weight_exp"] if configs["merge_bbox"] else None,
    }


def per_class_nms(dets: np.ndarray, categories: int, max_per_image: int,
                  **nms_kwargs: Any) -> dict[int, np.ndarray]:
    """Per-class soft-NMS of one image's detections, then keep the `max_per_image` best.

    Args:
        dets: (N, 8) float32 rows `[x1, y1, x2, y2, score, tl, br, cls]`, cls 0-based; rows with
            score -1 (rejected) are ignored.
        categories: number of classes C.
        max_per_image: score cut over all classes; ties at the cut are all kept.
        nms_kwargs: passed to `soft_nms`.

    Returns:
        {cls: (n, 5) float32 [x1, y1, x2, y2, score]} for cls in 1..C (1-based), each in the
        order soft-NMS picked them.
    """
    dets = dets[dets[:, 4] > -1]
    # One stable sort groups the rows by class in their original order; empty classes cost
    # nothing.
    dets = dets[np.argsort(dets[:, 7], kind="stable")]
    classes, starts = np.unique(dets[:, 7].astype(np.int64), return_index=True)
    bounds = dict(zip(classes.tolist(), zip(starts.tolist(), [*starts[1:].tolist(), len(dets)])))
    empty = np.zeros((0, 5), dtype=np.float32)
    top_bboxes = {}
    for j in range(categories):
        if j not in bounds:
            top_bboxes[j + 1] = empty
            continue
        begin, end = bounds[j]
        _, kept = soft_nms(dets[begin:end, 0:7], **nms_kwargs)
        top_bboxes[j + 1] = kept[:, 0:5]

    scores = np.concatenate([b[:, 4] for b in top_bboxes.values()])
    if len(scores) > max_per_image:
        kth = len(scores) - max_per_image
        thresh = np.partition(scores, kth)[kth]
        top_bboxes = {j: b[b[:, 4] >= thresh] for j, b in top_bboxes.items()}
    return top_bboxes


def decode_kwargs(cfg: dict) -> dict[str, Any]:
    """The decode settings of a db config, as `nnet.test` takes them."""
    return {"K": cfg["top_k"], "kernel": cfg["nms_kernel"], "ae_threshold": cfg["ae_threshold"],
            "num_dets": cfg["num_dets"]}


@dataclass
class ScaleInput:
    """One image at one test scale, ready for the network (see `prepare_cornernet`).

    `pixels` is (1 or 2, h, w, 3) uint8: the canvas and, with `test_flipped`, its mirror image.
    """

    pixels: np.ndarray
    border: np.ndarray
    size: np.ndarray
    ratios: np.ndarray
    out_width: int
    scale: float


def prepare_cornernet(db: DETECTION, image: np.ndarray) -> list[ScaleInput]:
    """The CPU part of CornerNet inference for one (H, W, 3) uint8 BGR image: per test scale,
    resize, centre on the canvas and mirror. Runs in the reader thread of `detect`."""
    cfg = db.configs
    inputs = []
    for scale in cfg["test_scales"]:
        canvas, border, size = resize_and_pad(image, scale)
        out_h, out_w = output_size(canvas.shape[:2], cfg)
        ratios = np.array([out_h / canvas.shape[0], out_w / canvas.shape[1]], dtype=np.float32)
        pixels = canvas[None]
        if cfg["test_flipped"]:
            pixels = np.stack((canvas, cv2.flip(canvas, 1)))
        inputs.append(ScaleInput(pixels, border, size, ratios, out_w, scale))
    return inputs


def run_cornernet(db: DETECTION, nnet: Network, images: list[list[ScaleInput]],
                  timer: StageTimer | None = None) -> list[dict[int, np.ndarray]]:
    """Detect objects in prepared images with a CornerNet or CornerNet-Squeeze network.

    Images whose canvases fall in the same bucket at a scale (`db.test_buckets`; without
    buckets, whose canvases have the same size) go through the network together.

    Args:
        db: dataset with `configs` (top_k, ae_threshold, nms_kernel, num_dets, test_flipped,
            test_scales, test_buckets, input_size, output_sizes, categories, nms_* ,
            weight_exp, merge_bbox, max_per_image), `mean`, `std`.
        nnet: NetworkFactory-like: `device`, `test(images, **decode_kwargs)` returning
            detections (B, num_dets, 8) first.
        images: per image, `prepare_cornernet`'s output.
        timer: where the time of the network and of the NMS is added up, if given.

    Returns:
        Per image {cls 1..C: (n, 5) float32 [x1, y1, x2, y2, score]} in image pixels.
    """
    timer = timer or StageTimer()
    cfg = db.configs
    buckets = canvas_buckets(cfg["test_buckets"], nnet.device)
    per_image: list[list[np.ndarray]] = [[] for _ in images]
    for scale_index in range(len(cfg["test_scales"])):
        groups: dict[tuple, list[int]] = {}
        for k, inputs in enumerate(images):
            canvas_hw = inputs[scale_index].pixels.shape[1:3]
            groups.setdefault(bucket_of(canvas_hw, buckets), []).append(k)
        for bucket, members in groups.items():
            scale_inputs = [images[k][scale_index] for k in members]
            with timer.stage("network"):
                # Each canvas at its bucket's top-left corner keeps its own placement: border,
                # ratios and out_width stay the canvas's (core/inference/buckets.py).
                batch = in_weights_layout(network_input(
                    np.concatenate([paste(x.pixels, bucket) for x in scale_inputs]), db.mean,
                    db.std, nnet.device), nnet)
                dets = nnet.test(batch, **decode_kwargs(cfg))[0].float().cpu().numpy()
            with timer.stage("nms"):
                per_input = len(scale_inputs[0].pixels)
                for k, x, rows in zip(members, scale_inputs, np.split(dets, len(members))):
                    scale_dets = rows[0]
                    if per_input == 2:
                        scale_dets = np.concatenate((scale_dets, flip_back(rows[1], x.out_width)))
                    per_image[k].append(map_to_image(scale_dets, x.ratios, x.border, x.size,
                                                     x.scale))
    with timer.stage("nms"):
        return [per_class_nms(np.concatenate(dets, axis=0), cfg["categories"],
                              cfg["max_per_image"], **nms_config(cfg)) for dets in per_image]


def cornernet_inference(db: DETECTION, nnet: Network, image: np.ndarray) -> dict[int, np.ndarray]:
    """Detect objects in one (H, W, 3) uint8 BGR image: `run_cornernet` of
    `prepare_cornernet`. Returns {cls 1..C: (n, 5) float32 [x1, y1, x2, y2, score]}."""
    return run_cornernet(db, nnet, [prepare_cornernet(db, image)])[0]

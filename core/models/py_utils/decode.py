"""Test-time decoding of corner heads into boxes, and the gather helpers shared with the losses.

Semantics follow the original CornerNet-Lite `_decode`: sigmoid, max-pool NMS on the heatmaps,
top-K corners over all classes and positions, every (top-left, bottom-right) pair of the top K
forms a candidate box, and pairs are rejected (score -1) when their classes differ, their
embeddings are further apart than `ae_threshold`, or the box is inverted.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def transpose_and_gather(feat: Tensor, ind: Tensor) -> Tensor:
    """Pick feature vectors at flat spatial indices.

    Args:
        feat: (B, C, H, W) any float dtype.
        ind: (B, M) int64, flat indices `y * W + x` into the H*W positions.

    Returns:
        (B, M, C), same dtype as `feat`; row m of image b is `feat[b, :, ind // W, ind % W]`.
    """
    batch, channels = feat.shape[:2]
    # Gathering from the (B, C, H*W) view avoids materialising a permuted copy of the whole map.
    index = ind.unsqueeze(1).expand(batch, channels, ind.shape[1])
    return feat.flatten(2).gather(2, index).transpose(1, 2)


def nms_heatmap(heat: Tensor, kernel: int = 1) -> Tensor:
    """Zero every score that is not the maximum of its `kernel` x `kernel` neighbourhood.

    Args:
        heat: (B, C, H, W) float scores.
        kernel: odd window size; 1 keeps everything.

    Returns:
        (B, C, H, W), same dtype; local maxima keep their value, the rest become 0.
    """
    pad = (kernel - 1) // 2
    hmax = F.max_pool2d(heat, kernel, stride=1, padding=pad)
    return heat * (hmax == heat)


def topk(scores: Tensor, K: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The K best entries of each image over all classes and positions.

    Args:
        scores: (B, C, H, W) float.
        K: number of entries per image; at most C * H * W.

    Returns:
        scores (B, K) float, same dtype as the input, descending;
        inds (B, K) int64, flat spatial index `y * W + x` (class removed);
        clses (B, K) int64, 0-based class;
        ys, xs (B, K) float32, integer-valued map coordinates.
    """
    batch, _, height, width = scores.shape
    top_scores, top_inds = scores.view(batch, -1).topk(K)
    clses = top_inds // (height * width)
    inds = top_inds % (height * width)
    ys = (inds // width).float()
    xs = (inds % width).float()
    return top_scores, inds, clses, ys, xs


def decode(
    tl_heat: Tensor,
    br_heat: Tensor,
    tl_tag: Tensor,
    br_tag: Tensor,
    tl_regr: Tensor | None,
    br_regr: Tensor | None,
    K: int = 100,
    kernel: int = 1,
    ae_threshold: float = 1.0,
    num_dets: int = 1000,
    no_border: bool = False,
) -> Tensor:
    """Turn one stack's corner heads into scored boxes.

    Args:
        tl_heat, br_heat: (B, C, H, W) heatmap logits (the sigmoid is applied here).
        tl_tag, br_tag: (B, 1, H, W) embeddings.
        tl_regr, br_regr: (B, 2, H, W) sub-pixel offsets (x, y), or both None to skip them.
        K: corners of each type kept per image; K * K candidate pairs.
        kernel: NMS window on the heatmaps.
        ae_threshold: pairs whose embeddings differ by more than this are rejected.
        num_dets: rows returned per image; at most K * K.
        no_border: also reject pairs whose top-left corner lies on the top or left edge of the
            map or whose bottom-right corner lies on the bottom or right edge (Saccade crops,
            where such corners are usually cut by the crop, not real corners).

    Returns:
        (B, num_dets, 8) float32 rows `[x1, y1, x2, y2, score, tl_score, br_score, cls]` in
        output-map coordinates, `cls` 0-based, sorted by score; rejected pairs have score -1.
    """
    batch, channels, height, width = tl_heat.shape
    if K > channels * height * width or num_dets > K * K:
        raise ValueError(
            f"decode needs K <= C*H*W = {channels * height * width} and num_dets <= K*K; "
            f"got K={K}, num_dets={num_dets}: lower top_k or num_dets in the config"
        )

    tl_heat = nms_heatmap(tl_heat.float().sigmoid(), kernel)
    br_heat = nms_heatmap(br_heat.float().sigmoid(), kernel)
    tl_scores, tl_inds, tl_clses, tl_ys, tl_xs = topk(tl_heat, K)
    br_scores, br_inds, br_clses, br_ys, br_xs = topk(br_heat, K)

    # Pair grid: dim 1 indexes the top-left corner, dim 2 the bottom-right corner.
    tl_ys, tl_xs = tl_ys.unsqueeze(2), tl_xs.unsqueeze(2)
    br_ys, br_xs = br_ys.unsqueeze(1), br_xs.unsqueeze(1)

    # The border test uses the integer corner positions, before the offsets move them.
    on_border = None
    if no_border:
        on_border = (tl_ys == 0) | (tl_xs == 0) | (br_ys == height - 1) | (br_xs == width - 1)

    if tl_regr is not None and br_regr is not None:
        tl_off = transpose_and_gather(tl_regr.float(), tl_inds)
        br_off = transpose_and_gather(br_regr.float(), br_inds)
        tl_xs = tl_xs + tl_off[..., 0:1]
        tl_ys = tl_ys + tl_off[..., 1:2]
        br_xs = br_xs + br_off[..., 0].unsqueeze(1)
        br_ys = br_ys + br_off[..., 1].unsqueeze(1)

    boxes = torch.stack(torch.broadcast_tensors(tl_xs, tl_ys, br_xs, br_ys), dim=3)

    tl_emb = transpose_and_gather(tl_tag.float(), tl_inds)
    br_emb = transpose_and_gather(br_tag.float(), br_inds).transpose(1, 2)
    dists = (tl_emb - br_emb).abs()

    scores = (tl_scores.unsqueeze(2) + br_scores.unsqueeze(1)) / 2
    reject = (
        (tl_clses.unsqueeze(2) != br_clses.unsqueeze(1))
        | (dists > ae_threshold)
        | (br_xs < tl_xs)
        | (br_ys < tl_ys)
    )
    if on_border is not None:
        reject = reject | on_border
    scores = scores.masked_fill(reject, -1)

    scores, pair_inds = scores.view(batch, -1).topk(num_dets)
    tl_pick = pair_inds // K
    br_pick = pair_inds % K
    boxes = boxes.view(batch, -1, 4).gather(1, pair_inds.unsqueeze(2).expand(-1, -1, 4))
    columns = (
        scores,
        tl_scores.gather(1, tl_pick),
        br_scores.gather(1, br_pick),
        tl_clses.gather(1, tl_pick).float(),
    )
    return torch.cat([boxes, torch.stack(columns, dim=2)], dim=2)

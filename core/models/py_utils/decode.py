"""Test-time decoding of corner heads into boxes, and the gather helpers shared with the losses.

Semantics follow the original CornerNet-Lite `_decode`: sigmoid, max-pool NMS on the heatmaps,
top-K corners over all classes and positions, every (top-left, bottom-right) pair of the top K
forms a candidate box, and pairs are rejected (score -1) when their classes differ, their
embeddings are further apart than `ae_threshold`, or the box is inverted.

The top-K corners are found without scoring every pixel (`peak_topk`): the original spends most
of its time max-pooling all class maps, while only a few hundred pixels can be among the best.
The result is that of the dense computation bit for bit; equal corner scores are ordered by
their flat (class, y, x) index, where `torch.topk` leaves their order unspecified.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

# torch runs an operation on several threads only from this many elements on.
PARALLEL_GRAIN = 32768
# sigmoid_scores works in blocks below the parallel grain and a multiple of every vector width,
# so each block is computed by one thread with the vector formula only.
SIGMOID_BLOCK = 16384
# peak_topk first looks at this many rows (one class, one y) per wanted corner.
CANDIDATE_ROWS_PER_K = 4


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


def sigmoid_scores(logits: Tensor) -> Tensor:
    """Elementwise sigmoid whose value for an element does not depend on where it sits.

    torch's CPU kernel computes the last few elements of each thread's range with a scalar
    formula that can differ by one ulp from its vector formula, so `logits.sigmoid()` of a whole
    map and of a few gathered elements can disagree. Here every element goes through the vector
    formula: the flat input is padded to whole blocks that are each computed by one thread.

    Args:
        logits: any shape, float32.

    Returns:
        Same shape, float32 probabilities.
    """
    if logits.device.type != "cpu":
        return logits.sigmoid()
    flat = logits.reshape(-1)
    blocks = -(-flat.numel() // SIGMOID_BLOCK)
    padded = flat.new_zeros(blocks * SIGMOID_BLOCK)
    padded[:flat.numel()] = flat
    padded = padded.view(blocks, SIGMOID_BLOCK)
    for row in padded:
        torch.sigmoid(row, out=row)
    return padded.view(-1)[:flat.numel()].view(logits.shape)


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


def ordered_topk(values: Tensor, K: int) -> tuple[Tensor, Tensor]:
    """The K largest entries of each row, ties broken by the lower index.

    `Tensor.topk` orders equal values arbitrarily; a fixed order makes the fast and the dense
    decoding paths agree on every row, and the output the same on every machine.

    Args:
        values: (B, N) float.
        K: entries per row, at most N.

    Returns:
        values (B, K) descending, and their indices (B, K) int64 into the N entries. No
        operation has a shape that depends on the values: nothing waits for the device.
    """
    kth = values.topk(K, dim=1).values[:, -1:]
    above = values > kth
    ties = values == kth
    wanted = K - above.sum(1, keepdim=True)
    chosen = above | (ties & (ties.cumsum(1) <= wanted))
    # Exactly K entries of each row are chosen. Their indices in ascending order, without
    # `nonzero`'s data-dependent shape (a device sync, and a graph break under torch.compile):
    # key each chosen entry by its index counted from the end, so the lowest index has the
    # largest key, and take the K largest keys.
    count = values.shape[1]
    from_end = torch.arange(count, 0, -1, device=values.device)
    # A NaN in a row chooses fewer than K (it is neither above nor equal to anything): the
    # missing keys are 0, clamped to the last entry rather than indexing past the row (on a
    # GPU a device-side assert that ends the process).
    inds = (count - torch.where(chosen, from_end, 0).topk(K, dim=1).values).clamp_max(count - 1)
    picked = values.gather(1, inds)
    picked, order = picked.sort(dim=1, descending=True, stable=True)
    return picked, inds.gather(1, order)


def topk(scores: Tensor, K: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The K best entries of each image over all classes and positions (ties: lower flat index).

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
    top_scores, top_inds = ordered_topk(scores.reshape(batch, -1), K)
    return (top_scores, *_split_index(top_inds, height, width))


def _split_index(flat: Tensor, height: int, width: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Flat (class, y, x) indices -> spatial index, class, y and x (float) as `topk` returns.

    Written with // and - only: the ONNX exporter cannot translate % by a symbolic size."""
    clses = flat // (height * width)
    inds = flat - clses * (height * width)
    ys = inds // width
    return inds, clses, ys.float(), (inds - ys * width).float()


def dense_peak_topk(logits: Tensor, K: int, kernel: int = 1
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """`peak_topk` with the dense computation only, for exported graphs: no Python loop, no
    data-dependent shape; every pixel is scored.

    `Tensor.topk` breaks ties among equal scores in no fixed order in torch, while ONNX's TopK
    puts the lower index first, which is `ordered_topk`'s order: the exported graph gives
    `peak_topk`'s corners, and so does this function when no two of the K best scores tie.
    """
    batch, _, height, width = logits.shape
    heat = nms_heatmap(logits.sigmoid(), kernel)
    scores, flat = heat.reshape(batch, -1).topk(K, dim=1)
    return (scores, *_split_index(flat, height, width))


def peak_topk(logits: Tensor, K: int, kernel: int = 1
              ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """`topk(nms_heatmap(sigmoid_scores(logits), kernel), K)`, without scoring every pixel.

    Rows (one class, one y) are ranked by their largest logit; `t` is the row maximum of rank
    `CANDIDATE_ROWS_PER_K * K`, and the pixels whose logit reaches `t` (all in the best rows) are
    the candidates. Every other pixel has a logit below `t`, so a score at most sigmoid(t) (plus
    rounding: at least 8 ulps are allowed for). When K candidates are local maxima scoring above
    that, they are the K best of the whole map, ties included; otherwise four times as many rows
    are taken, and when that reaches a quarter of the rows the whole map is scored.

    Args:
        logits: (B, C, H, W) float32 heatmap logits.
        K: entries per image; at most C * H * W.
        kernel: odd local-maximum window.

    Returns:
        As `topk`, bit for bit.
    """
    if logits.device.type != "cpu" or torch.compiler.is_compiling():
        # Under torch.compile the candidate search's data-dependent loop would break the graph
        # at each `float()`; the dense pass compiles into it, with the same results.
        return dense_topk(logits, K, kernel)
    batch, channels, height, width = logits.shape
    row_max = logits.amax(3).reshape(batch, channels * height)
    found = [_image_peaks(logits[b], row_max[b], K, kernel) for b in range(batch)]
    scores = torch.stack([score for score, _ in found])
    flat = torch.stack([index for _, index in found])
    return (scores, *_split_index(flat, height, width))


def dense_topk(logits: Tensor, K: int, kernel: int = 1
               ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """`peak_topk` by scoring every pixel: on a GPU one pass over the whole batch beats the
    candidate search's per-image loop of small kernels, each waiting for the device. Same
    arguments and results."""
    return topk(nms_heatmap(sigmoid_scores(logits), kernel), K)


def _image_peaks(logits: Tensor, row_max: Tensor, K: int, kernel: int) -> tuple[Tensor, Tensor]:
    """`peak_topk` of one image: logits (C, H, W), row_max (C * H,) the largest logit of each
    row. Returns scores (K,) and flat indices (K,) into the C * H * W pixels."""
    channels, height, width = logits.shape
    rows = logits.reshape(channels * height, width)
    take = CANDIDATE_ROWS_PER_K * K
    while take <= len(row_max) // 4:
        threshold = row_max.topk(take).values[-1]
        picked = (row_max >= threshold).nonzero()[:, 0]
        flat = _pixels_reaching(rows, picked, threshold)
        if len(flat) >= K:
            values = _peak_values(logits, flat, kernel)
            scores, order = ordered_topk(values[None], K)
            # Pixels outside the candidates score at most sigmoid(threshold), up to rounding.
            bound = float(sigmoid_scores(threshold.view(1))[0]) * (1 + 2 ** -20)
            if float(scores[0, -1]) > bound:
                return scores[0], flat[order[0]]
        take *= 4
    heat = nms_heatmap(sigmoid_scores(logits)[None], kernel)
    scores, flat = ordered_topk(heat.reshape(1, -1), K)
    return scores[0], flat[0]


def _pixels_reaching(rows: Tensor, picked: Tensor, threshold: Tensor) -> Tensor:
    """Flat indices, ascending, of the pixels of rows `picked` (ascending) of `rows` (R, W)
    whose logit reaches `threshold`.

    The rows go in groups below torch's parallel grain: on a busy machine every parallel region
    waits for a free core, which costs more than these small operations themselves.
    """
    width = rows.shape[1]
    group = max(1, PARALLEL_GRAIN // width)
    found = []
    for part in picked.split(group):
        hits = (rows[part] >= threshold).nonzero()
        found.append(part[hits[:, 0]] * width + hits[:, 1])
    return torch.cat(found)


def _peak_values(logits: Tensor, flat: Tensor, kernel: int) -> Tensor:
    """`nms_heatmap(sigmoid_scores(logits))` at the flat (c, y, x) indices `flat` (N,) of
    logits (C, H, W): each pixel's score if it is the largest of its window, else 0."""
    _, height, width = logits.shape
    ys = flat % (height * width) // width
    xs = flat % width
    pad = (kernel - 1) // 2
    window = torch.arange(-pad, pad + 1, device=flat.device)
    dys = window.repeat_interleave(kernel)
    dxs = window.repeat(kernel)
    ny, nx = ys[:, None] + dys, xs[:, None] + dxs
    inside = (ny >= 0) & (ny < height) & (nx >= 0) & (nx < width)
    neighbours = (flat[:, None] + dys * width + dxs).where(inside, flat[:, None])
    scores = sigmoid_scores(logits.reshape(-1)[neighbours])
    # Outside the map max_pool2d pads with -inf: such positions can never be the maximum.
    scores = scores.where(inside, torch.zeros((), dtype=scores.dtype, device=scores.device))
    own = scores[:, (kernel * kernel) // 2]
    return own * (scores.amax(1) == own)


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
    corners: Callable[..., tuple[Tensor, ...]] = peak_topk,
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
        corners: finds the K best corners of a heatmap, `peak_topk` or, for export,
            `dense_peak_topk`.

    Returns:
        (B, num_dets, 8) float32 rows `[x1, y1, x2, y2, score, tl_score, br_score, cls]` in
        output-map coordinates, `cls` 0-based, sorted by score; rejected pairs have score -1.
    """
    batch, channels, height, width = tl_heat.shape
    if not torch.compiler.is_exporting() and (channels * height * width < K or num_dets > K * K):
        raise ValueError(
            f"decode needs K <= C*H*W = {channels * height * width} and num_dets <= K*K; "
            f"got K={K}, num_dets={num_dets}: lower top_k or num_dets in the config"
        )

    tl_scores, tl_inds, tl_clses, tl_ys, tl_xs = corners(tl_heat.float(), K, kernel)
    br_scores, br_inds, br_clses, br_ys, br_xs = corners(br_heat.float(), K, kernel)

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

"""Training losses of the corner detectors: focal loss on the heatmaps, associative embedding
(pull/push) on the tags, smooth-L1 on the offsets, and for Saccade a focal loss on the attention
maps.

The numbers follow the original CornerNet-Lite losses (see shared/reference/README.md, section
5), computed densely and batched instead of with boolean indexing, and without mutating the model
outputs. Everything is computed in float32 with autocast disabled, whatever the outputs' dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .decode import transpose_and_gather

# The original clamps the sigmoid away from 0 and 1 so that the logs stay finite.
_PROB_EPS = 1e-4
# The original's stabiliser in every "/ (count + eps)" normalisation.
_COUNT_EPS = 1e-4


def clamped_sigmoid(logits: Tensor) -> Tensor:
    """(any shape) logits, any float dtype -> float32 probabilities in [1e-4, 1 - 1e-4].

    Out of place, unlike the original's `sigmoid_`, so the model outputs stay intact.
    """
    return logits.float().sigmoid().clamp(min=_PROB_EPS, max=1 - _PROB_EPS)


def focal_loss(pred: Tensor, gt: Tensor, valid: Tensor | None = None) -> Tensor:
    """Penalty-reduced pixel focal loss of one prediction map (CornerNet eq. 1).

    Args:
        pred: (B, C, H, W) float32 probabilities, already clamped (see `clamped_sigmoid`).
        gt: (B, C, H, W) float32 targets; exactly 1 at objects, gaussian bumps below 1 around.
        valid: optional (B, C, H, W) or (B, 1, H, W) float32 weights in [0, 1]; both the
            positive and the negative terms are multiplied by it (Saccade's ignore regions).

    Returns:
        0-dim float32: `-(pos + neg) / num_pos` with `num_pos` the number of gt == 1 pixels in
        the whole batch (masked or not, as in the original), or `-neg` when there are none.
    """
    pos = gt.eq(1)
    neg_weights = torch.where(gt.lt(1), (1 - gt).pow(4), 0)
    pos_loss = torch.where(pos, pred.log() * (1 - pred).pow(2), 0)
    neg_loss = (1 - pred).log() * pred.pow(2) * neg_weights
    if valid is not None:
        pos_loss = pos_loss * valid
        neg_loss = neg_loss * valid
    # With no positive pixel the positive sum is 0, so dividing by 1 gives the original's `-neg`
    # without a data-dependent branch (no host sync on GPU) and without 0/0 in the backward.
    num_pos = pos.sum().float().clamp(min=1)
    return -(pos_loss.sum() + neg_loss.sum()) / num_pos


def ae_loss(
    tl_tag: Tensor, br_tag: Tensor, mask: Tensor, push_diagonal: bool = False
) -> tuple[Tensor, Tensor]:
    """Associative-embedding pull and push terms, per image.

    Args:
        tl_tag, br_tag: (B, M) float32 embeddings of each object's two corners.
        mask: (B, M) uint8 or bool, nonzero for the real objects (the rest is padding). The
            count `n` of objects per image comes from it as an integer count, never as a
            logical OR of bools.
        push_diagonal: see `CornerNet_Loss`. True reproduces the original: every valid pair
            (i, j), i == j included, adds `(relu(1 - |e_i - e_j|) - 1 / (n + 1e-4)) /
            (n (n - 1) + 1e-4)`. False sums only the pairs i != j, without the constant:
            `relu(1 - |e_i - e_j|) / (n (n - 1) + 1e-4)`.

    Returns:
        pull, push: (B,) float32 each, unweighted. Their sums over the batch are the original's
        batch values.
    """
    valid = mask != 0
    num = valid.sum(dim=1, keepdim=True).float()
    mean = (tl_tag + br_tag) / 2

    tl_pull = (tl_tag - mean).pow(2) / (num + _COUNT_EPS)
    br_pull = (br_tag - mean).pow(2) / (num + _COUNT_EPS)
    pull = torch.where(valid, tl_pull, 0).sum(dim=1) + torch.where(valid, br_pull, 0).sum(dim=1)

    pairs = valid.unsqueeze(1) & valid.unsqueeze(2)
    num = num.unsqueeze(2)
    num_pairs = (num - 1) * num
    dist = F.relu(1 - (mean.unsqueeze(1) - mean.unsqueeze(2)).abs())
    if push_diagonal:
        dist = (dist - 1 / (num + _COUNT_EPS)) / (num_pairs + _COUNT_EPS)
    else:
        eye = torch.eye(mask.shape[1], dtype=torch.bool, device=mask.device)
        pairs = pairs & ~eye
        dist = dist / (num_pairs + _COUNT_EPS)
    push = torch.where(pairs, dist, 0).sum(dim=(1, 2))
    return pull, push


def off_loss(off: Tensor, gt_off: Tensor, mask: Tensor) -> Tensor:
    """Smooth-L1 (beta 1) offset loss over the real objects of the batch.

    Args:
        off: (B, M, 2) float32 predicted offsets gathered at the gt corners.
        gt_off: (B, M, 2) float32 target offsets.
        mask: (B, M) uint8 or bool, nonzero for the real objects.

    Returns:
        0-dim float32: summed smooth-L1 over valid objects and both coordinates, divided by
        (number of valid objects in the batch + 1e-4).
    """
    valid = mask != 0
    per_elem = F.smooth_l1_loss(off, gt_off, reduction="none")
    total = torch.where(valid.unsqueeze(2), per_elem, 0).sum()
    return total / (valid.sum().float() + _COUNT_EPS)


class CornerNet_Loss(nn.Module):
    """Loss of CornerNet and CornerNet-Squeeze (no parameters).

    `forward(outs, targets)` returns `(total, terms)`:
        terms: dict of detached 0-dim float32 tensors, keys "focal", "pull", "push", "off" in
            this order. Each is that component summed over the stacks, multiplied by its weight
            (focal has weight 1, tl and br added), then divided by the number of stacks.
        total: 0-dim float32 with gradient, equal to `sum(terms.values())`, the original's loss
            (which has shape [1]; this one is 0-dim).
    In the reference's terms (shared/reference/README.md, section 5), `terms[k] =
    expected[k] / n_stacks`.

    Single-object images and `push_diagonal`: the original's push sums over all valid pairs
    including i == j. For an image with n >= 2 objects the diagonal and the `-1/n` offsets add
    up to a constant of about 1e-4 / (n (n - 1)); for an image with one object they add
    `(1 - 1/(1 + 1e-4)) / 1e-4`, which float32 evaluates to 1.0001659 per stack. That constant
    has no gradient: it only inflates the reported push and makes it depend on how many images
    have a single object. The default `push_diagonal=False` leaves it out, so a single-object
    image adds exactly 0 push, and the gradients are those of the original. `push_diagonal=True`
    reproduces the original numbers exactly (the parity tests use it).

    Args:
        pull_weight, push_weight, off_weight: weights of the tag and offset terms.
        focal: heatmap focal loss, called as `focal(pred, gt)` (`focal(pred, gt, valid)` in
            Saccade) with pred the clamped probabilities of one stack; `focal_loss` by default.
        push_diagonal: True for the original push (see above), False to drop the constant.
    """

    def __init__(
        self,
        pull_weight: float = 1.0,
        push_weight: float = 1.0,
        off_weight: float = 1.0,
        focal: Callable[..., Tensor] = focal_loss,
        push_diagonal: bool = False,
    ) -> None:
        super().__init__()
        self.pull_weight = pull_weight
        self.push_weight = push_weight
        self.off_weight = off_weight
        self.focal = focal
        self.push_diagonal = push_diagonal

    def forward(
        self, outs: Sequence[Sequence[Tensor]], targets: Sequence[Tensor]
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss of one batch.

        Args:
            outs: [tl_heats, br_heats, tl_tags, br_tags, tl_offs, br_offs], each a list over
                stacks of (B, C, H, W) heatmap logits, (B, 1, H, W) tags, (B, 2, H, W) offsets,
                any float dtype.
            targets: [gt_tl_heat (B, C, H, W) float32, gt_br_heat, gt_mask (B, M) uint8 or
                bool, gt_tl_off (B, M, 2) float32, gt_br_off, gt_tl_ind (B, M) int64 flat
                `y * W + x`, gt_br_ind].

        Returns:
            (total, terms) as described in the class docstring.
        """
        with torch.autocast(outs[0][0].device.type, enabled=False):
            sums = self._corner_sums(outs[:6], targets[:7])
        return self._combine(sums, n_stacks=len(outs[0]))

    def _corner_sums(
        self,
        outs: Sequence[Sequence[Tensor]],
        targets: Sequence[Tensor],
        tl_valid: Tensor | None = None,
        br_valid: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """Weighted heatmap, tag and offset terms summed over stacks (not yet averaged)."""
        tl_heats, br_heats, tl_tags, br_tags, tl_offs, br_offs = outs
        gt_tl_heat, gt_br_heat, gt_mask, gt_tl_off, gt_br_off, gt_tl_ind, gt_br_ind = targets
        gt_tl_heat, gt_br_heat = gt_tl_heat.float(), gt_br_heat.float()
        gt_tl_off, gt_br_off = gt_tl_off.float(), gt_br_off.float()

        focal = pull = push = off = torch.zeros((), device=gt_tl_heat.device)
        for tl_heat, br_heat, tl_tag, br_tag, tl_off, br_off in zip(
            tl_heats, br_heats, tl_tags, br_tags, tl_offs, br_offs
        ):
            focal = focal + self._heat_focal(tl_heat, gt_tl_heat, tl_valid)
            focal = focal + self._heat_focal(br_heat, gt_br_heat, br_valid)

            tl_emb = transpose_and_gather(tl_tag.float(), gt_tl_ind)[..., 0]
            br_emb = transpose_and_gather(br_tag.float(), gt_br_ind)[..., 0]
            stack_pull, stack_push = ae_loss(tl_emb, br_emb, gt_mask, self.push_diagonal)
            pull = pull + stack_pull.sum()
            push = push + stack_push.sum()

            tl_off = transpose_and_gather(tl_off.float(), gt_tl_ind)
            br_off = transpose_and_gather(br_off.float(), gt_br_ind)
            off = off + off_loss(tl_off, gt_tl_off, gt_mask) + off_loss(br_off, gt_br_off, gt_mask)
        return {
            "focal": focal,
            "pull": self.pull_weight * pull,
            "push": self.push_weight * push,
            "off": self.off_weight * off,
        }

    def _heat_focal(self, logits: Tensor, gt: Tensor, valid: Tensor | None) -> Tensor:
        pred = clamped_sigmoid(logits)
        if valid is None:
            return self.focal(pred, gt)
        return self.focal(pred, gt, valid.float())

    @staticmethod
    def _combine(sums: dict[str, Tensor], n_stacks: int) -> tuple[Tensor, dict[str, Tensor]]:
        """Average over stacks; the total is the sum of the averaged terms."""
        terms = {name: value / max(n_stacks, 1) for name, value in sums.items()}
        total = sum(terms.values())
        return total, {name: value.detach() for name, value in terms.items()}


class CornerNet_Saccade_Loss(CornerNet_Loss):
    """Loss of CornerNet-Saccade: `CornerNet_Loss` with valid masks on the heatmap focal loss,
    plus a focal loss on the attention maps.

    `terms` has keys "focal", "att", "pull", "push", "off", each divided by the number of
    stacks. As in the original, "att" is the sum over scales of `focal_loss` summed over stacks
    and divided by the number of stacks, and then divided by the number of stacks once more with
    the rest: `terms["att"] = expected["att"] / n_stacks` in the reference's terms. The
    constructor arguments and `push_diagonal` are those of `CornerNet_Loss`.
    """

    def forward(
        self, outs: Sequence[Sequence], targets: Sequence
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss of one batch.

        Args:
            outs: the six lists of `CornerNet_Loss.forward`, then atts: a list over stacks of
                lists over scales of (B, 1, h_s, w_s) attention logits.
            targets: the seven targets of `CornerNet_Loss.forward`, then gt_tl_valid and
                gt_br_valid ((B, C, H, W) or (B, 1, H, W) float32, 0 where the heatmap loss is
                ignored), then gt_atts: a list over scales of (B, 1, h_s, w_s) float32.

        Returns:
            (total, terms) with terms keys "focal", "att", "pull", "push", "off".
        """
        atts, (gt_tl_valid, gt_br_valid, gt_atts) = outs[6], targets[7:10]
        n_stacks = len(outs[0])
        with torch.autocast(outs[0][0].device.type, enabled=False):
            sums = self._corner_sums(outs[:6], targets[:7], gt_tl_valid, gt_br_valid)
            att = torch.zeros((), device=sums["focal"].device)
            for scale, gt_att in enumerate(gt_atts):
                gt_att = gt_att.float()
                scale_loss = sum(focal_loss(clamped_sigmoid(a[scale]), gt_att) for a in atts)
                att = att + scale_loss / max(len(atts), 1)
        sums = {"focal": sums["focal"], "att": att, **{k: sums[k] for k in ("pull", "push", "off")}}
        return self._combine(sums, n_stacks)

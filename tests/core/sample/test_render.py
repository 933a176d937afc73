"""The device renderer gives exactly the targets of a plain per-object numpy builder that follows
the original's drawing rules, on real augmented coco128 batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.sample import data_sampling_func
from core.sample.render import normalize_image, render_targets, static_radius
from tests._dense_reference import coco128_db, dense_targets, system_config

CATEGORIES = 80


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("dbs-cache")


def _batches(db, sampler: str, batch_size: int, count: int, data_aug: bool = True):
    k_ind = 0
    for _ in range(count):
        batch, k_ind = data_sampling_func[sampler](system_config(batch_size), db, k_ind,
                                                    data_aug=data_aug)
        yield batch


def _to_torch(batch: dict) -> dict[str, torch.Tensor]:
    return {key: torch.from_numpy(value) for key, value in batch.items() if key != "meta"}


def _assert_equal(rendered: list, reference: list) -> None:
    assert len(rendered) == len(reference)
    for got, want in zip(rendered, reference):
        if isinstance(want, list):
            _assert_equal(got, want)
            continue
        assert got.dtype == torch.from_numpy(want).dtype
        assert torch.equal(got, torch.from_numpy(want))


@pytest.mark.parametrize("config, sampler", [("CornerNet", "cornernet"),
                                             ("CornerNet_Squeeze", "cornernet"),
                                             ("CornerNet_Saccade", "cornernet_saccade")])
@pytest.mark.slow  # 4-6 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_rendered_targets_equal_dense_reference_on_all_coco128_images(coco128, cache_dir,
                                                                      config, sampler):
    """Both paths, the CPU's window and the GPU's static window, on each batch: the batches
    and their reference are drawn once."""
    db = coco128_db(coco128, config, cache_dir)
    objects = 0
    for batch in _batches(db, sampler, batch_size=16, count=8):
        reference = dense_targets(batch, db.configs, CATEGORIES)
        for static in (False, True):
            rendered = render_targets(_to_torch(batch), db.configs, CATEGORIES, static=static)
            _assert_equal(rendered, reference)
        objects += int(batch["num_objects"].sum())
    assert objects > 300


@pytest.mark.parametrize("overrides", [{"gaussian_bump": False}, {"gaussian_radius": 3}])
@pytest.mark.parametrize("static", [False, True], ids=["cpu-window", "gpu-static-window"])
def test_fixed_radius_and_no_bump_follow_the_config(coco128, cache_dir, overrides, static):
    db = coco128_db(coco128, "CornerNet_Squeeze", cache_dir, **overrides)
    batch = next(_batches(db, "cornernet", batch_size=16, count=1))
    rendered = render_targets(_to_torch(batch), db.configs, CATEGORIES, static=static)
    _assert_equal(rendered, dense_targets(batch, db.configs, CATEGORIES))
    if not overrides.get("gaussian_bump", True):
        # Only corner pixels are set: as many ones as distinct corners, nothing in between.
        heat = rendered[0]
        assert set(heat.unique().tolist()) <= {0.0, 1.0}


def test_saccade_valid_masks_are_zero_only_under_ignore_boxes(coco128, cache_dir):
    db = coco128_db(coco128, "CornerNet_Saccade", cache_dir)
    batch = next(_batches(db, "cornernet_saccade", batch_size=32, count=1))
    assert batch["num_ignore"].sum() > 0
    tl_valid = render_targets(_to_torch(batch), db.configs, CATEGORIES)[7]
    for b in range(32):
        corners = {(int(c), int(y), int(x)) for (x, y, _, _), c in zip(
            batch["ignore_boxes"][b, :batch["num_ignore"][b]],
            batch["ignore_classes"][b, :batch["num_ignore"][b]])}
        zeros = {tuple(index) for index in (tl_valid[b] == 0).nonzero().tolist()}
        assert corners <= zeros
        assert {c for c, _, _ in zeros} <= {c for c, _, _ in corners}


def test_rendering_is_deterministic(coco128, cache_dir):
    db = coco128_db(coco128, "CornerNet_Saccade", cache_dir)
    batch = _to_torch(next(_batches(db, "cornernet_saccade", batch_size=16, count=1)))
    _assert_equal(render_targets(batch, db.configs, CATEGORIES),
                  [t.numpy() if torch.is_tensor(t) else [a.numpy() for a in t]
                   for t in render_targets(batch, db.configs, CATEGORIES)])
    first = normalize_image(batch["image"], batch["color"])
    assert torch.equal(first, normalize_image(batch["image"], batch["color"]))


def test_normalize_image_applies_the_per_image_affine(coco128, cache_dir):
    db = coco128_db(coco128, "CornerNet_Squeeze", cache_dir)
    batch = next(_batches(db, "cornernet", batch_size=4, count=1))
    out = normalize_image(*map(torch.from_numpy, (batch["image"], batch["color"])))
    assert out.shape == (4, 3, 511, 511) and out.dtype == torch.float32
    pixels = batch["image"].astype(np.float64)
    affine = batch["color"].astype(np.float64)
    want = np.einsum("bck,bhwk->bchw", affine[:, :, :3], pixels) + affine[:, :, 3, None, None]
    np.testing.assert_allclose(out.numpy(), want, atol=1e-5)


def test_the_static_window_holds_every_radius_of_a_box_inside_the_map():
    from core.sample.utils import gaussian_radius
    assert static_radius(128, 128, 0.3) == 29 and static_radius(32, 32, 0.3) == 7
    sides = np.arange(0, 130, dtype=np.float64)
    radii = gaussian_radius(sides[:, None], sides[None, :], 0.3).astype(np.int64)
    assert radii.max() == static_radius(128, 128, 0.3)
    assert radii[:100, :100].max() < static_radius(128, 128, 0.3)


def test_an_empty_batch_renders_empty_maps_on_both_paths(coco128, cache_dir):
    db = coco128_db(coco128, "CornerNet_Saccade", cache_dir)
    batch = _to_torch(next(_batches(db, "cornernet_saccade", batch_size=2, count=1)))
    batch["num_objects"].zero_()
    for static in (False, True):
        heats = render_targets(batch, db.configs, CATEGORIES, static=static)[:2]
        assert all(float(heat.abs().sum()) == 0.0 for heat in heats)

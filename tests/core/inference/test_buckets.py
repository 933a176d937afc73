"""Canvas buckets (core/inference/buckets.py): a few input shapes at test time, each image's
placement kept; and the network input in the weights' memory layout."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.config import ConfigError, check_db_config
from core.inference.buckets import GPU_BUCKETS, bucket_of, canvas_buckets, paste
from core.inference.cornernet import (
    in_weights_layout,
    prepare_cornernet,
    run_cornernet,
    weights_layout,
)


def test_a_canvas_goes_to_the_smallest_bucket_holding_it():
    buckets = ((511, 767), (767, 511), (511, 511), (767, 767))
    assert bucket_of((383, 511), buckets) == (511, 511)
    assert bucket_of((511, 639), buckets) == (511, 767)
    assert bucket_of((639, 383), buckets) == (767, 511)
    assert bucket_of((639, 767), buckets) == (767, 767)
    assert bucket_of((511, 511), buckets) == (511, 511)  # a canvas of a bucket's size: itself


def test_of_equal_buckets_the_first_is_taken_and_a_larger_canvas_keeps_its_size():
    assert bucket_of((383, 383), ((511, 767), (767, 511))) == (511, 767)
    assert bucket_of((383, 383), ((767, 511), (511, 767))) == (767, 511)
    assert bucket_of((1023, 511), ((511, 767), (767, 767))) == (1023, 511)
    assert bucket_of((383, 511), ()) == (383, 511)


def test_auto_buckets_on_a_gpu_only():
    assert canvas_buckets("auto", "cpu") == ()
    assert canvas_buckets("auto", torch.device("cuda", 1)) == GPU_BUCKETS
    assert canvas_buckets([[255, 383]], "cpu") == ((255, 383),)
    assert canvas_buckets([], "cuda") == ()


def test_a_canvas_is_pasted_at_the_top_left_corner_of_its_bucket():
    pixels = np.arange(2 * 3 * 4 * 3, dtype=np.uint8).reshape(2, 3, 4, 3) + 1
    out = paste(pixels, (5, 7))
    assert out.shape == (2, 5, 7, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[:, :3, :4], pixels)
    assert out[:, 3:].sum() == 0 and out[:, :, 4:].sum() == 0
    assert paste(pixels, (3, 4)) is pixels


@pytest.mark.parametrize("value", [[[500, 767]], [[511]], "gpu", [[511, 767.0]], [[0, 511]]])
def test_buckets_off_the_canvas_grid_are_refused(value):
    with pytest.raises(ConfigError, match=r"db.test_buckets must be \"auto\" or a list"):
        check_db_config({"test_buckets": value})


def test_auto_is_the_default_and_a_list_or_none_is_accepted():
    assert check_db_config({})["test_buckets"] == "auto"
    assert check_db_config({"test_buckets": []})["test_buckets"] == []
    assert check_db_config({"test_buckets": [[255, 383]]})["test_buckets"] == [[255, 383]]


# ---- the input's memory layout ---------------------------------------------------------

def _convs() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.Conv2d(4, 4, 3))


def test_the_weights_layout_is_read_from_a_kernel_wider_than_one():
    model = _convs()
    assert weights_layout(model) == torch.contiguous_format
    assert weights_layout(model.to(memory_format=torch.channels_last)) == torch.channels_last


def test_off_the_cpu_the_input_follows_the_weights_layout():
    channels_last = torch.empty(2, 3, 15, 17, device="meta",
                                memory_format=torch.channels_last)
    nchw = in_weights_layout(channels_last, SimpleNamespace(model=_convs()))
    assert nchw.is_contiguous() and not nchw.is_contiguous(memory_format=torch.channels_last)
    wrapped = SimpleNamespace(module=_convs().to(memory_format=torch.channels_last))
    back = in_weights_layout(nchw, SimpleNamespace(model=wrapped))
    assert back.is_contiguous(memory_format=torch.channels_last)


def test_on_the_cpu_and_for_other_runtimes_the_input_stays_as_made():
    batch = torch.empty(2, 3, 15, 17, memory_format=torch.channels_last)
    assert in_weights_layout(batch, SimpleNamespace(model=_convs())) is batch
    on_meta = batch.to("meta")
    assert in_weights_layout(on_meta, SimpleNamespace(session=object())) is on_meta


# ---- run_cornernet with buckets --------------------------------------------------------

class RecordingNet:
    """A network on `device` that records each input's shape and layout and finds one box at
    output-map x 90-100, y 30-40 per input (inside each of `IMAGES`)."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.model = _convs()
        self.inputs = []

    def test(self, images, **kwargs):
        self.inputs.append((tuple(images.shape), images.is_contiguous()))
        row = [90, 30, 100, 40, 0.9, 0.9, 0.9, 0]
        return (torch.tensor([[row, [0, 0, 1, 1, -1, 0, 0, 0]]] * len(images)),)


def _db(buckets, flipped=False):
    configs = check_db_config({"input_size": [511, 511], "output_sizes": [[128, 128]],
                               "categories": 1, "top_k": 2, "num_dets": 2,
                               "test_flipped": flipped, "test_buckets": buckets})
    return SimpleNamespace(configs=configs, mean=np.zeros(3, np.float32),
                           std=np.ones(3, np.float32))


IMAGES = [np.full((h, w, 3), 9, np.uint8) for h, w in ((300, 500), (480, 640), (200, 600))]


@pytest.mark.parametrize("flipped", [False, True])
def test_bucketed_images_share_one_input_shape_and_keep_their_boxes(flipped):
    plain, bucketed = RecordingNet(), RecordingNet()
    prepared = [prepare_cornernet(_db([], flipped), image) for image in IMAGES]
    alone = run_cornernet(_db([], flipped), plain, prepared)
    together = run_cornernet(_db([[511, 767]], flipped), bucketed, prepared)
    per_input = 2 if flipped else 1
    assert sorted(shape for shape, _ in plain.inputs) == sorted(
        [(per_input, 3, 383, 511), (per_input, 3, 511, 767), (per_input, 3, 255, 639)])
    assert bucketed.inputs == [((3 * per_input, 3, 511, 767), False)]  # on the CPU: as made
    for before, after in zip(alone, together):
        np.testing.assert_array_equal(before[1], after[1])
    # The first image's canvas (383 x 511, border 41 x 5) went into a 511 x 767 bucket: its box
    # maps back through the canvas's own ratio (128 / 511), not the bucket's (192 / 767).
    assert together[0][1][0, :2].tolist() == pytest.approx([90 * 511 / 128 - 5,
                                                            30 * 383 / 96 - 41])


def test_on_a_gpu_auto_buckets_and_the_input_is_in_the_weights_layout():
    net = RecordingNet("meta")
    net.test = lambda images, **kwargs: (  # meta tensors hold no values: record, answer on cpu
        net.inputs.append((tuple(images.shape), images.is_contiguous())),
        RecordingNet().test(images))[1]
    prepared = [prepare_cornernet(_db("auto"), image) for image in IMAGES]
    run_cornernet(_db("auto"), net, prepared)
    assert sorted(net.inputs) == [((1, 3, 511, 511), True), ((2, 3, 511, 767), True)]


# ---- the must-show properties on real images, with a small model -----------------------

@pytest.mark.slow  # 20 forwards of CornerNet_Tiny: seconds on an idle 2-core machine
def test_buckets_on_real_images_keep_ap_and_the_detections_of_unchanged_canvases(coco128,
                                                                                 tmp_path):
    from bench.bench_buckets import compare_buckets
    from core.config import SystemConfig
    from core.dbs import datasets
    from core.deploy.network import InferenceNetwork

    db_config = {"categories": 80, "input_size": [128, 128], "output_sizes": [[32, 32]],
                 "test_scales": [0.25], "test_flipped": False, "top_k": 20, "num_dets": 100,
                 "ae_threshold": 100, "image_dirs": {"val": str(coco128 / "images")},
                 "annotation_files": {"val": str(coco128 / "annotations" /
                                                 "instances_coco128_val.json")}}
    system_config = SystemConfig().update_config({"model": "CornerNet_Tiny",
                                                  "cache_dir": str(tmp_path / "cache")})
    db = datasets["COCO"](db_config, split="val", sys_config=system_config)
    torch.manual_seed(0)
    nnet = InferenceNetwork(system_config, db.configs, "cpu")
    with torch.no_grad():  # heatmaps favour class 1 (person), so that real detections come out
        for heads in (nnet.model.tl_heats, nnet.model.br_heats):
            heads[-1][-1].bias[0] += 4
    buckets = [[127, 255], [255, 127], [255, 255]]
    report = compare_buckets(db, nnet, system_config, [int(i) for i in db.db_inds[:10]],
                             buckets, score_dir=tmp_path / "scores")
    assert report["shapes_after"] <= len(buckets) < report["shapes_before"]
    assert report["unchanged"] >= 4 and report["changed"] >= 1
    assert report["unchanged_equal"] == report["unchanged"]
    assert report["ap_before"] > 0
    assert abs(report["ap_after"] - report["ap_before"]) <= 0.002

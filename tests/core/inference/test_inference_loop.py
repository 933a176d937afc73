"""detect(): the test loop the trainer and test.py share, with a fake network and dataset."""

import pickle
import threading
import time

import numpy as np
import pytest
import torch

from core.config import SystemConfig, check_db_config
from core.deploy.network import InferenceNetwork
from core.inference.cornernet_saccade import cornernet_saccade_inference
from core.inference.loop import MOST_AT_ONCE, DetectionRun, cpu_workers, detect
from core.utils.images import ImageReadError


class FakeDB:
    """Images of different sizes whose pixel value is their index; `bad` ones are unreadable."""

    def __init__(self, count=7, bad=(), raise_on=None):
        self.configs = check_db_config({"input_size": [127, 127], "output_sizes": [[32, 32]],
                                        "categories": 2, "top_k": 2, "num_dets": 2,
                                        "test_flipped": False})
        self.mean = np.zeros(3, np.float32)
        self.std = np.ones(3, np.float32)
        self.db_inds = np.arange(count)
        self.bad, self.raise_on = set(bad), raise_on

    def image_id(self, ind):
        return 100 + int(ind)

    def read_image(self, ind):
        if ind in self.bad:
            raise ImageReadError(f"/data/{ind}.jpg", "not a decodable image")
        if ind == self.raise_on:
            raise RuntimeError("disk on fire")
        height = 100 if ind % 2 else 60  # two canvas sizes: 127 and 127 x 255
        return np.full((height, 200 if ind % 2 else 100, 3), ind, np.uint8)


class FakeNet:
    """One box per image scoring 0.1 + index / 2550 (from its pixels); records batch sizes."""

    device = torch.device("cpu")

    def __init__(self):
        self.batches = []

    def test(self, images, **kwargs):
        self.batches.append(len(images))
        value = images[:, 0, 60, 60]  # the centre pixel, normalised: image index / 255
        rows = [[[10, 10, 20, 20, 0.1 + float(v) / 10, 1, 1, 0],
                 [0, 0, 1, 1, -1, 0, 0, 0]] for v in value]
        return (torch.tensor(rows, dtype=torch.float32),)


def system(strict=False):
    return SystemConfig().update_config({"strict_images": strict})


def test_every_image_is_detected_in_order_and_unreadable_ones_are_listed():
    db, net, seen = FakeDB(bad={2}), FakeNet(), []
    run = detect(db, net, system(), db.db_inds, on_image=seen.append)
    assert run.image_ids == [100 + k for k in range(7)]
    assert list(run.detections) == [100, 101, 103, 104, 105, 106]
    assert list(run.unreadable) == [102] and "/data/2.jpg" in run.unreadable[102]
    assert [r.image_id for r in seen] == run.image_ids
    assert seen[2].detections is None and seen[3].image.shape == (100, 200, 3)
    scores = [run.detections[100 + k][1][0, 4] for k in (0, 1, 3)]
    np.testing.assert_allclose(scores, [0.1, 0.1 + 1 / 2550, 0.1 + 3 / 2550], rtol=1e-5)


def test_batches_group_consecutive_images_of_one_size_and_give_the_same_detections():
    db = FakeDB()
    one, three = FakeNet(), FakeNet()
    single = detect(db, one, system(), db.db_inds, batch_size=1)
    batched = detect(db, three, system(), db.db_inds, batch_size=3)
    assert one.batches == [1] * 7
    # Groups 0-2 (sizes even, odd, even) and 3-5 (odd, even, odd) make batches of 2 and 1,
    # in the order each size first appears; image 6 is alone.
    assert three.batches == [2, 1, 2, 1, 1]
    for image_id, dets in single.detections.items():
        for cls in dets:
            np.testing.assert_array_equal(dets[cls], batched.detections[image_id][cls])


def test_with_buckets_a_batch_of_images_of_two_sizes_is_one_forward_in_image_order():
    db = FakeDB()
    db.configs["test_buckets"] = [[127, 255]]  # holds both canvases, 127 x 127 and 127 x 255
    one, three = FakeNet(), FakeNet()
    single = detect(db, one, system(), db.db_inds, batch_size=1)
    seen = []
    batched = detect(db, three, system(), db.db_inds, batch_size=3, on_image=seen.append)
    assert three.batches == [3, 3, 1]
    assert [r.image_id for r in seen] == list(batched.detections) == [100 + k for k in range(7)]
    for image_id, dets in single.detections.items():
        for cls in dets:
            np.testing.assert_array_equal(dets[cls], batched.detections[image_id][cls])


def test_strict_images_makes_an_unreadable_image_an_error():
    db = FakeDB(bad={1})
    with pytest.raises(ImageReadError, match="/data/1.jpg"):
        detect(db, FakeNet(), system(strict=True), db.db_inds)


def test_an_error_in_the_reader_thread_reaches_the_caller():
    db = FakeDB(raise_on=3)
    with pytest.raises(RuntimeError, match="disk on fire"):
        detect(db, FakeNet(), system(), db.db_inds)


def test_runs_of_ranks_merge_and_pickle():
    db = FakeDB(bad={5})
    parts = [detect(db, FakeNet(), system(), db.db_inds[rank::2]) for rank in range(2)]
    merged = pickle.loads(pickle.dumps(DetectionRun.merge(parts)))
    whole = detect(db, FakeNet(), system(), db.db_inds)
    assert sorted(merged.image_ids) == whole.image_ids
    assert merged.unreadable == whole.unreadable and merged.detections.keys() == \
        whole.detections.keys()
    assert set(merged.seconds) >= {"read", "network", "nms"}


class FakeSaccadeNet:
    """Attention peaks at one place of every crop; each call returns one box per crop."""

    device = torch.device("cpu")

    def test(self, images, no_att=False, **kwargs):
        rows = torch.tensor([[[4, 4, 8, 12, 0.9, 0.9, 0.9, 0]]]).repeat(len(images), 1, 1)
        if no_att:
            return rows
        atts = [torch.zeros(len(images), 1, 64 // r, 64 // r) for r in (16, 8, 4)]
        atts[1][:, 0, 4, 6] = 0.9
        return rows, atts


def test_saccade_runs_through_the_same_loop():
    db = FakeDB(count=3)
    db.configs.update(check_db_config({
        "input_size": [64, 64], "output_sizes": [[16, 16]], "categories": 2, "top_k": 2,
        "num_dets": 1, "init_sizes": [64], "ref_dets": False, "att_scales": [[1, 2, 4]],
        "att_thresholds": [0.3], "att_max_crops": 4}))
    system_config = SystemConfig().update_config({"sampling_function": "cornernet_saccade"})
    run = detect(db, FakeSaccadeNet(), system_config, db.db_inds)
    for ind in db.db_inds:
        expected = cornernet_saccade_inference(db, FakeSaccadeNet(), db.read_image(ind))
        for cls, boxes in expected.items():
            np.testing.assert_array_equal(run.detections[db.image_id(ind)][cls], boxes)
    assert len(run.detections[100][1]) >= 1


def test_the_decode_clock_waits_for_the_networks_own_gpu(monkeypatch):
    """`torch.cuda.synchronize()` without a device waits for the current GPU, which need not be
    the network's (a second GPU, `--device cuda:1`)."""
    from types import SimpleNamespace

    from core.inference.timing import StageTimer, decode_clock

    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.br_offs = torch.nn.ModuleList([torch.nn.Identity()])

        def forward(self, x):
            return self.br_offs[-1](x) * 2

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    model = Heads()
    nnet = SimpleNamespace(model=model, device=torch.device("cuda", 1))
    timer = StageTimer()
    with decode_clock(nnet, timer, sync=True):
        model(torch.ones(1))
    assert waited == [torch.device("cuda", 1)]
    assert set(timer.seconds) == {"decode", "network"}


def test_the_decode_clock_never_waits_for_a_gpu_unless_asked(monkeypatch):
    from types import SimpleNamespace

    from core.inference.timing import StageTimer, decode_clock

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    model = torch.nn.Module()
    model.br_offs = torch.nn.ModuleList([torch.nn.Identity()])
    model.forward = lambda x: model.br_offs[-1](x) * 2
    for device, split in ((torch.device("cuda", 0), False), (torch.device("cpu"), True)):
        timer = StageTimer()
        with decode_clock(SimpleNamespace(model=model, device=device), timer):
            model(torch.ones(1))
        assert ("decode" in timer.seconds) is split, device
    assert waited == []


class SlowNet(FakeNet):
    """FakeNet whose early images take longest, so that threads finish out of order; records
    the torch thread count each call saw."""

    def __init__(self):
        super().__init__()
        self.threads = []

    def test(self, images, **kwargs):
        self.threads.append(torch.get_num_threads())
        index = round(float(images[0, 0, 60, 60]) * 255)
        time.sleep(0.002 * (7 - index))
        return super().test(images, **kwargs)


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def test_images_in_threads_reach_the_caller_in_order_with_the_same_detections(two_threads):
    db, seen = FakeDB(bad={4}), []
    alone = detect(db, FakeNet(), system(), db.db_inds)
    net = SlowNet()
    run = detect(db, net, system(), db.db_inds, workers=3, batch_size=2, on_image=seen.append)
    assert [r.image_id for r in seen] == run.image_ids == alone.image_ids
    assert list(run.detections) == list(alone.detections) and list(run.unreadable) == [104]
    for image_id, dets in alone.detections.items():
        for cls in dets:
            np.testing.assert_array_equal(dets[cls], run.detections[image_id][cls])
    assert set(net.threads) == {1}  # each batch on one torch thread
    assert torch.get_num_threads() == 2  # and the count is given back
    torch.set_num_threads(4)
    shared = SlowNet()
    detect(db, shared, system(), db.db_inds, workers=2)
    assert set(shared.threads) == {2}  # 4 threads for 2 at once: 2 each


def test_an_error_in_an_image_thread_reaches_the_caller_and_the_threads_end(two_threads):
    db = FakeDB(bad={5})
    with pytest.raises(ImageReadError, match="/data/5.jpg"):
        detect(db, SlowNet(), system(strict=True), db.db_inds, workers=3)
    with pytest.raises(RuntimeError, match="disk on fire"):
        detect(FakeDB(raise_on=3), SlowNet(), system(), db.db_inds, workers=2)
    assert torch.get_num_threads() == 2
    time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name.startswith("test-net")]


class NoisyDB(FakeDB):
    """FakeDB's sizes with noise for pixels, and decoding that keeps boxes of a random net."""

    def __init__(self, count):
        super().__init__(count)
        self.configs.update(ae_threshold=100, top_k=10, num_dets=20)

    def read_image(self, ind):
        shape = super().read_image(ind).shape
        return np.random.default_rng(ind).integers(0, 255, shape, dtype=np.uint8)


def test_a_real_network_in_image_threads_gives_the_numbers_of_one_thread(two_threads):
    db = NoisyDB(count=6)
    torch.manual_seed(0)
    net = InferenceNetwork(SystemConfig().update_config({"model": "CornerNet_Tiny"}),
                           db.configs, "cpu")
    with torch.no_grad():  # heatmaps favour class 1, so that boxes come out
        for heads in (net.model.tl_heats, net.model.br_heats):
            heads[-1][-1].bias[0] += 4
    torch.set_num_threads(1)
    alone = detect(db, net, system(), db.db_inds)
    torch.set_num_threads(2)
    run = detect(db, net, system(), db.db_inds, workers=2)
    assert sum(len(d) for dets in alone.detections.values() for d in dets.values()) > 0
    for image_id, dets in alone.detections.items():
        for cls in dets:
            np.testing.assert_array_equal(dets[cls], run.detections[image_id][cls])
    assert {"network", "decode", "nms"} <= set(run.seconds)
    line = run.summary(1.0, "cpu", 0.1)
    assert "s (added up over 2 images at once), waiting for images" in line, line
    assert "added up" not in alone.summary(1.0, "cpu", 0.1)


def test_images_in_threads_only_for_torch_computing_on_the_cpu(monkeypatch):
    import core.utils.threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    net = InferenceNetwork(SystemConfig().update_config({"model": "CornerNet_Tiny"}),
                           FakeDB().configs, "cpu")
    monkeypatch.setattr(core.utils.threads, "usable_cpus", lambda: 16)
    assert cpu_workers(net, 3) == 3
    assert cpu_workers(net, 64) == MOST_AT_ONCE  # many CPUs: several threads per image
    assert cpu_workers(net) == MOST_AT_ONCE
    monkeypatch.setattr(core.utils.threads, "usable_cpus", lambda: 2)
    assert cpu_workers(net, 3) == 2  # --threads beyond the CPUs is capped to them
    assert cpu_workers(net) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_workers(net) == 1
    assert cpu_workers(FakeNet(), 3) == 1  # not a torch module: its runtime keeps its threads
    monkeypatch.setattr(net, "device", torch.device("cuda"))
    assert cpu_workers(net, 3) == 1

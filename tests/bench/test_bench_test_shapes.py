"""bench/bench_test_shapes.py rehearsed on the CPU: a row per layout and shape, each fed in
the layout it names, and the network left as it was found."""

import pytest
import torch

from bench import bench_test_shapes
from core.deploy.network import InferenceNetwork
from core.inference.cornernet import weights_layout


@pytest.mark.slow  # 12 forwards of CornerNet_Tiny on the CPU
def test_each_layout_and_shape_is_timed_twice_and_the_network_alone_once(monkeypatch):
    fed, networks = [], []
    test = InferenceNetwork.test

    def recording(self, images, **kwargs):
        networks.append(self)
        fed.append((tuple(images.shape), images.is_contiguous(), weights_layout(self.model)))
        return test(self, images, **kwargs)

    monkeypatch.setattr(InferenceNetwork, "test", recording)
    args = bench_test_shapes.parse_args(["--tiny", "--shapes", "127x127", "127x255",
                                         "--batch", "2"])
    rows = bench_test_shapes.measure(args, log=lambda line: None)
    timed = [(r["layout"], tuple(r["shape"])) for r in rows if "first_ms" in r]
    assert timed == [(layout, shape) for layout in ("nchw", "cl-input", "cl")
                     for shape in ((127, 127), (127, 255))]
    assert all(r["first_ms"] > 0 and r["second_ms"] > 0 for r in rows if "first_ms" in r)
    alone = [(r["layout"], r["network_batch"]) for r in rows if "network_ms_per_image" in r]
    assert alone == [("nchw", 2), ("cl-input", 2), ("cl", 2)]
    # Two calls per shape, in the layout each row names.
    nchw, channels_last = torch.contiguous_format, torch.channels_last
    assert [(contiguous, weights) for _, contiguous, weights in fed] == (
        [(True, nchw)] * 4 + [(False, nchw)] * 4 + [(False, channels_last)] * 4)
    assert [shape for shape, _, _ in fed][:4] == [(1, 3, 127, 127)] * 2 + [(1, 3, 127, 255)] * 2
    assert weights_layout(networks[-1].model) == nchw  # given back as it was built
    assert bench_test_shapes.parse_args([]).config == "CornerNet_Squeeze"

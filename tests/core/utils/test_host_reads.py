"""The host-read counter (core/utils/host_reads.py) that proves on the CPU what a GPU would wait
for: every kind it names is counted, and device work alone counts nothing."""

import torch

from core.utils.host_reads import counting_host_reads


def test_device_work_alone_counts_nothing():
    x = torch.randn(64)
    with counting_host_reads() as counted:
        y = torch.where(x > 0, x, 0).sum() + x.topk(5).values.sum()
        x.masked_fill(x > 1, 0).cumsum(0)
    assert counted.total == 0, counted.reads
    assert y.shape == ()


def test_each_kind_of_host_read_is_counted_by_name():
    x = torch.arange(-3.0, 4.0)
    with counting_host_reads() as counted:
        assert bool(torch.isfinite(x).all())
        assert x.sum().item() == 0.0
        assert x[x > 0].tolist() == [1.0, 2.0, 3.0]
        assert torch.nonzero(x).shape == (6, 1)
        assert x.numpy().shape == (7,)
    assert counted.reads == {"_local_scalar_dense": 2, "index (bool mask)": 1, "nonzero": 1,
                             "tolist": 1, "numpy": 1}
    assert counted.total == 6


def test_the_wrapped_tensor_methods_are_given_back():
    before = torch.Tensor.tolist
    with counting_host_reads():
        assert torch.Tensor.tolist is not before
    assert torch.Tensor.tolist is before
    assert torch.tensor([1, 2]).tolist() == [1, 2]

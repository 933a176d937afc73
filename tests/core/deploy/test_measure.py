"""core/deploy/measure.py: a benchmark row's times are taken on the thread count its column
names. Opening a runtime sets torch's threads (the runtime's sessions take theirs from torch), so
a row opened after its column's threads were set would be timed on every CPU."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.deploy import measure
from core.utils.threads import usable_cpus, use_threads


@pytest.mark.skipif(usable_cpus() < 2, reason="two thread counts need two usable CPUs")
def test_each_column_is_timed_on_its_own_thread_count(monkeypatch):
    timed: dict[str, int] = {}

    def open_network(name, system_config, db, testiter, device, file, precision=None,
                     threads=None):
        use_threads(threads)  # as the real one: the runtime's threads, from torch
        network = SimpleNamespace(model=torch.nn.Linear(2, 2), device=torch.device("cpu"),
                                  test=lambda image, **_: [torch.zeros(1, 1, 8)])
        return network, None

    def ms_per_image(nnet, image, batch, settings, reps):
        timed[str(len(timed))] = torch.get_num_threads()
        return 1.0

    monkeypatch.setattr(measure, "open_network", open_network)
    monkeypatch.setattr(measure, "ms_per_image", ms_per_image)
    monkeypatch.setattr(measure, "decode_kwargs", lambda configs: {})
    db = SimpleNamespace(configs={}, db_inds=[])
    saved = torch.get_num_threads()
    try:
        row = measure.measure_row("torch:fp32", None, db, 0, {}, torch.zeros(1, 3, 8, 8),
                                  [np.zeros((1, 1, 8))], device=torch.device("cpu"),
                                  threads=[1, 2], batches=[1], reps=1, images=0)
    finally:
        torch.set_num_threads(saved)
    assert set(row["ms"]) == {"1", "2"}
    assert timed == {"0": 1, "1": 2}

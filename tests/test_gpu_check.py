"""bench/gpu_check.py: one line and exit 2 without a GPU; its configs load and read coco128."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bench.gpu_check import CONFIGS, REPO, write_configs
from core.config import load_config
from core.dbs import datasets


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_without_a_gpu_it_stops_at_once_in_one_line():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py")],
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("error: gpu_check needs a CUDA GPU")
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def test_its_configs_are_the_shipped_ones_for_20_iterations_on_coco128(tmp_path, coco128):
    folder = write_configs(tmp_path, coco128)
    for name in CONFIGS:
        system_config, db_config = load_config(name, folder)
        shipped, _ = load_config(name)
        assert system_config.max_iter == 20 and system_config.snapshot == 20
        assert system_config.batch_size == shipped.batch_size
        assert system_config.chunk_sizes == shipped.chunk_sizes
        assert str(system_config.cache_dir).startswith(str(tmp_path))
        if name != "CornerNet_Tiny":
            db = datasets["COCO"](db_config, split=system_config.train_split,
                                  sys_config=system_config)
            assert len(db.db_inds) > 50

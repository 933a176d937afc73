"""The export tests' network: weights whose outputs vary like a trained network's, and one
ONNX export of them shared by the session (`spread_export`, registered in conftest.py)."""

from __future__ import annotations

import shutil

import pytest
import torch

IMAGE = "000000000529.jpg"  # the image the export checks torch against


def spread_weights(model: torch.nn.Module) -> None:
    """Weights N(0, 1/fan_in), so the maps vary with the image (a fresh initialisation gives
    near-constant maps, where every pair scores alike and rounding picks among near-ties), and
    heat heads that score class 0 only, so top-left and bottom-right corners pair up."""
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for param in model.parameters():
            if param.dim() > 1:
                param.copy_(torch.randn(param.shape, generator=generator)
                            / param[0].numel() ** 0.5)
        for heads in (model.tl_heats, model.br_heats):
            heads[-1][-1].weight[1:] = 0
            heads[-1][-1].bias[1:] = -10


@pytest.fixture(scope="session")
def spread_export(coco128, tmp_path_factory):
    """(root, tools/export.py's stdout) of the one export of the session: CocoTiny iteration 0
    with `spread_weights`, exported by tools/export.py in this process (30 s of CPU, paid once
    for test_onnx_export and test_deploy). Tests take a copy (`copy_export`), never this."""
    from _inproc import run_script
    from _tiny_coco import make_tiny_coco

    from core.nnet.py_factory import NetworkFactory

    root = make_tiny_coco(coco128, tmp_path_factory.mktemp("export"))
    system_config, db = open_db(root)
    nnet = NetworkFactory(system_config, db, device="cpu")
    spread_weights(nnet.model)
    nnet.save_params(0)
    done = run_script("tools/export.py", "CocoTiny", "--testiter", 0, "--config-dir",
                      root / "configs", "--image", coco128 / "images" / IMAGE)
    assert done.returncode == 0, done.stderr
    return root, done.stdout


def copy_export(export, coco128, dest):
    """A CocoTiny folder of its own at `dest` holding the snapshot and the ONNX file of
    `spread_export` (the config names its own cache and results folders; the ONNX file
    records the weights' digest and iteration, not a folder, so the copy is a valid export)."""
    from _tiny_coco import make_tiny_coco

    root = make_tiny_coco(coco128, dest)
    for name in ("CocoTiny_0.pkl", "CocoTiny_0.onnx"):
        shutil.copy(snapshot_folder(export[0]) / name, snapshot_folder(root) / name)
    return root


def snapshot_folder(root):
    return root / "cache" / "nnet" / "CocoTiny"


def open_db(root):
    """(system config, val split) of the CocoTiny config under `root`."""
    from core.config import load_config
    from core.dbs import datasets

    system_config, db_config = load_config("CocoTiny", root / "configs")
    return system_config, datasets["COCO"](db_config, split="val", sys_config=system_config)

"""The export tests' network: weights whose outputs vary like a trained network's, and one
ONNX export of them shared by the session (`spread_export`, registered in conftest.py)."""

from __future__ import annotations

import shutil

import pytest

from bench._spread import spread_weights

IMAGE = "000000000529.jpg"  # the image the export checks torch against


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

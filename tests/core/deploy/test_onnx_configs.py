"""The shipped configs export with dynamic batch and size, and onnxruntime gives torch's outputs
on a real coco128 image at two sizes with a batch of 2 (the image and its mirror).

The three take 80-100 s each on 2 cores (4 min 26 s in all, beside a training run), more than
the suite's time allows: they are collected and run when CORNERNET_EXPORT_ALL=1 is set, and
deselected otherwise (tests/conftest.py; CornerNet_Tiny's export is tested in every run by
tests/core/deploy/test_onnx_export.py)."""


import cv2
import numpy as np
import pytest
import torch
from _onnx import spread_weights

from core.config import load_config
from core.deploy.onnx_graph import (
    DeployGraph,
    compare_outputs,
    export_onnx,
    metadata,
    output_names,
    size_rule,
)
from core.deploy.onnx_runtime import OnnxNetwork
from core.inference.cornernet import decode_kwargs, network_input, resize_and_pad
from core.models import build_model

pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[onnx]'")
pytest.importorskip("onnxruntime", reason="the onnx extra: pip install -e '.[onnx]'")
pytest.importorskip("onnxscript", reason="the onnx extra: pip install -e '.[onnx]'")

MEAN = np.array([0.40789654, 0.44719302, 0.47026115], dtype=np.float32)
STD = np.array([0.28863828, 0.27408164, 0.27809835], dtype=np.float32)


@pytest.mark.slow
@pytest.mark.parity  # the full-size networks
@pytest.mark.timeout(3600)
@pytest.mark.export_all  # 80-100 s of CPU per config: deselected unless CORNERNET_EXPORT_ALL=1
@pytest.mark.parametrize("name", ["CornerNet_Squeeze", "CornerNet_Saccade", "CornerNet"])
def test_shipped_config_exports_and_onnxruntime_equals_torch(name, coco128, tmp_path):
    system_config, db_config = load_config(name)
    categories = db_config["categories"]
    torch.manual_seed(0)
    model = build_model(system_config.model_name, categories).eval()
    spread_weights(model)
    # ae_threshold 100: pairs are judged by class and geometry only, so many rows are valid.
    settings = {**decode_kwargs(db_config), "ae_threshold": 100}
    # Under random weights the few corners of Saccade (K 12) and Squeeze (K 20) can pair into no
    # valid box (every bottom-right left of or above every top-left): 40 corners and 100 rows
    # give valid rows to compare at both sizes.
    settings.update(K=max(settings["K"], 40), num_dets=max(settings["num_dets"], 100))
    if model.with_att:
        settings["no_border"] = True
    image = cv2.imread(str(coco128 / "images" / "000000000529.jpg"))
    batches = []
    for scale in (0.25, 0.4):  # canvases 255x127 and 383x255
        canvas = resize_and_pad(image, scale)[0]
        batches.append(network_input(np.stack((canvas, cv2.flip(canvas, 1))), MEAN, STD,
                                     "cpu").contiguous())
    with torch.no_grad():
        expected = [model(batch, test=True, **settings) for batch in batches]

    rule = size_rule(model)
    path = tmp_path / f"{name}.onnx"
    names = export_onnx(DeployGraph(model, settings), path,
                        torch.zeros(2, 3, rule["multiple"] - 1, 2 * rule["multiple"] - 1), 18,
                        metadata(name, name, categories, settings, rule, output_names(model), 0),
                        2048)
    runtime = OnnxNetwork(path, name, categories)

    assert names == (["detections", "att0", "att1", "att2"] if model.with_att
                     else ["detections"])
    for batch, reference in zip(batches, expected):
        got = runtime.test(batch, **settings)
        if model.with_att:
            got, reference = [got[0], *got[1]], [reference[0], *reference[1]]
        else:
            got, reference = [got[0]], [reference[0]]
        report = compare_outputs([t.numpy() for t in got], [t.numpy() for t in reference])
        assert report["ok"], report
        assert min(report["valid"]) > 0, report  # rows compared in both images of each size

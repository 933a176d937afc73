"""An exported file names the snapshot it holds, and the onnxruntime runtime compares it.

These run without onnx: the identity is plain metadata and the comparison reads the snapshot
file. The end-to-end cases (a real export, test.py refusing it) are in test_onnx_export.py.
"""

import json

import pytest
import torch
from _tiny_coco import make_tiny_coco
from _tools import load_tool

from core.config import load_config
from core.dbs import datasets
from core.deploy.comparison import holds_snapshot
from core.deploy.exporter import check_out
from core.deploy.identity import check_identity
from core.deploy.onnx_graph import metadata, snapshot_weights, weights_digest
from core.errors import UsageError
from core.nnet.py_factory import NetworkFactory
from core.utils import files


@pytest.fixture
def tiny(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    system_config, db_config = load_config("CocoTiny", root / "configs")
    db = datasets["COCO"](db_config, split=None, sys_config=system_config)
    return system_config, NetworkFactory(system_config, db, device="cpu")


def meta_of(nnet, iteration, weights="raw"):
    """The decoded metadata an export of `nnet`'s weights at `iteration` writes."""
    module = nnet.ema.module if weights == "ema" else nnet.model
    text = metadata("CocoTiny", "CornerNet_Tiny", 80, {}, {"stride": 4, "multiple": 32},
                    ["detections"], iteration, weights, weights_digest(module.state_dict()), 128)
    return {key: json.loads(value) for key, value in text.items()}


def test_digest_is_the_same_for_a_model_and_its_snapshot_and_changes_with_one_value(tiny):
    system_config, nnet = tiny
    nnet.load_params(0, model_only=True)
    saved = torch.load(system_config.snapshot_file(0), weights_only=True)
    digest = weights_digest(nnet.model.state_dict())
    assert weights_digest(snapshot_weights(saved, "raw")) == digest
    official = {f"module.{key}": value for key, value in saved["model"].items()}
    assert weights_digest(snapshot_weights(official, "raw")) == digest
    assert snapshot_weights(official, "ema") == {}
    with torch.no_grad():
        next(nnet.model.parameters()).view(-1)[0] += 1e-6
    assert weights_digest(nnet.model.state_dict()) != digest


def test_the_export_of_the_snapshot_asked_for_is_accepted(tiny, tmp_path):
    system_config, nnet = tiny
    nnet.load_params(0, model_only=True)
    check_identity(meta_of(nnet, 0), tmp_path / "a.onnx", system_config, 0, False)


def test_a_retrained_snapshot_makes_its_old_export_stale(tiny, tmp_path):
    system_config, nnet = tiny
    nnet.load_params(0, model_only=True)
    meta = meta_of(nnet, 0)
    with torch.no_grad():
        next(nnet.model.parameters()).add_(0.01)
    nnet.save_params(0)  # iteration 0 trained again
    with pytest.raises(UsageError) as caught:
        check_identity(meta, tmp_path / "a.onnx", system_config, 0, False)
    message = str(caught.value)
    assert "\n" not in message
    assert "is stale" in message and "iteration 0's earlier weights" in message
    assert "CocoTiny_0.pkl (iteration 0)" in message
    assert "python tools/export.py CocoTiny --testiter 0" in message


def test_another_iterations_export_is_refused_naming_both_iterations(tiny, tmp_path):
    system_config, nnet = tiny
    nnet.load_params(0, model_only=True)
    meta = meta_of(nnet, 100)
    nnet.save_params(200)
    with pytest.raises(UsageError, match=r"exported from iteration 100, not iteration 200 "
                                         r"\(--testiter 200\)"):
        check_identity(meta, tmp_path / "a.onnx", system_config, 200, False)
    (system_config.snapshot_file(200)).unlink()  # only the export copied: the number still counts
    with pytest.raises(UsageError, match="exported from iteration 100, not iteration 200"):
        check_identity(meta, tmp_path / "a.onnx", system_config, 200, False)


def test_best_is_compared_by_the_iteration_the_snapshot_records(tiny, tmp_path):
    system_config, nnet = tiny
    nnet.load_params(0, model_only=True)
    nnet.save_params(7, path=system_config.snapshot_file("best"))
    check_identity(meta_of(nnet, 7), tmp_path / "a.onnx", system_config, "best", False)
    with pytest.raises(UsageError, match="exported from iteration 6, not iteration 7 "
                                         r"\(--testiter best\)"):
        check_identity(meta_of(nnet, 6), tmp_path / "a.onnx", system_config, "best", False)


def test_raw_weights_asked_of_an_export_of_the_average_is_refused(tiny, tmp_path):
    system_config, nnet = tiny
    nnet.load_params(0, model_only=True)
    meta = {**meta_of(nnet, 0), "weights": "ema"}
    with pytest.raises(UsageError, match="holds the average of the weights, but --raw-weights "
                                         ".*--testiter 0 --raw-weights"):
        check_identity(meta, tmp_path / "a.onnx", system_config, 0, True)
    # an export of the average compared with a snapshot that has none: stale, not accepted
    with pytest.raises(UsageError, match="is stale"):
        check_identity(meta, tmp_path / "a.onnx", system_config, 0, False)


def test_an_export_from_before_the_identity_is_refused_with_the_command_to_export_again(
        tiny, tmp_path):
    system_config, nnet = tiny
    old = {key: value for key, value in meta_of(nnet, 0).items()
           if key not in ("digest", "max_side")}
    with pytest.raises(UsageError, match=r"before exports recorded their snapshot \(no digest, "
                                         r"max_side.*export it again with python tools/export"):
        check_identity(old, tmp_path / "a.onnx", system_config, 0, False)


@pytest.mark.parametrize("opset", [7, 11, 17, 99, -1])
def test_an_opset_the_export_cannot_write_is_refused_before_exporting(opset, capsys):
    tool = load_tool("export")
    with pytest.raises(SystemExit) as caught:
        tool.parse_args(["CocoTiny", "--opset", str(opset)])
    assert caught.value.code == 2
    assert f"--opset {opset}: this export writes opsets 18 to 23" in capsys.readouterr().err


def test_an_out_that_is_a_folder_is_refused_before_the_export(tmp_path):
    with pytest.raises(UsageError, match=f"--out {tmp_path} is a folder"):
        check_out(tmp_path, 1000)


def test_an_out_on_a_full_disk_is_refused_before_the_export_and_stale_temp_files_go(
        tmp_path, monkeypatch):
    leftover = tmp_path / ".CocoTiny_0.onnx.999999999-1.tmp"  # a killed export's, pid gone
    leftover.write_bytes(b"partial")
    check_out(tmp_path / "CocoTiny_0.onnx", 1000)
    assert not leftover.exists()
    monkeypatch.setattr(files, "disk_free", lambda folder: 1000)
    with pytest.raises(files.DiskFull, match="the exported file need .*point --out at"):
        check_out(tmp_path / "CocoTiny_0.onnx", 10**6)


def test_the_benchmark_exports_again_a_file_of_another_iteration_or_unreadable(tiny, tmp_path):
    onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[onnx]'")
    system_config, nnet = tiny
    nnet.load_params(0, model_only=True)
    path = tmp_path / "CocoTiny_0.onnx"
    assert not holds_snapshot(path, system_config, 0)  # missing

    def write(meta):
        graph = onnx.helper.make_graph(
            [onnx.helper.make_node("Identity", ["x"], ["y"])], "g",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
        model = onnx.helper.make_model(graph)
        onnx.helper.set_model_props(model, {key: json.dumps(value) for key, value in meta.items()})
        onnx.save(model, path)

    write(meta_of(nnet, 0))
    assert holds_snapshot(path, system_config, 0)
    write(meta_of(nnet, 5))  # another iteration's export under this name
    assert not holds_snapshot(path, system_config, 0)
    write({key: value for key, value in meta_of(nnet, 0).items() if key != "digest"})
    assert not holds_snapshot(path, system_config, 0)  # from before the identity
    path.write_bytes(path.read_bytes()[:20])  # truncated
    assert not holds_snapshot(path, system_config, 0)

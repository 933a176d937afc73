"""The registry of runtimes (core/deploy/runtimes.py): a runtime defined outside the project
(here, in this test) is one `register` call, and test.py, the API and the benchmark run it by
name with no edit elsewhere; the registry alone decides which runtime opens a name or a file;
what core/deploy/builtin.py declares of the built-in runtimes, without importing them, is what
their modules implement."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _tiny_coco import inproc, make_tiny_coco
from _tools import load_tool

from core.config import load_config
from core.dbs.detection import DETECTION
from core.deploy import network, onnx_runtime, openvino_runtime
from core.deploy.builtin import Later
from core.deploy.network import InferenceNetwork
from core.deploy.runtimes import RUNTIMES, Runtime, open_network, register, runtime, runtime_of
from core.errors import UsageError
from cornernet import Detector

IMAGES = 6
# The built-in runtimes and the modules that implement them.
BUILT_IN = {"torch": network, "onnxruntime": onnx_runtime, "openvino": openvino_runtime}


class WrappedTorch:
    """A runtime's network that is torch underneath: it counts the batches it ran."""

    def __init__(self, inner: InferenceNetwork, precision: str) -> None:
        self.inner, self.precision = inner, f"wrapped {precision}"
        self.device, self.evaluated_weights = inner.device, inner.evaluated_weights
        self.batches = 0

    def test(self, images: torch.Tensor, **kwargs: Any) -> Any:
        self.batches += 1
        return self.inner.test(images, **kwargs)


OPENED: list[WrappedTorch] = []


def open_wrapped(path: Path, system_config: Any, db_config: dict, device: str, precision: str,
                 raw_weights: bool) -> WrappedTorch:
    network = WrappedTorch(InferenceNetwork.from_file(path, system_config, db_config, device,
                                                      raw_weights), precision)
    OPENED.append(network)
    return network


@pytest.fixture
def wrapped():
    """The runtime "wrapped" registered for one test, and taken out of the registry after."""
    entry = register(Runtime("wrapped", "torch behind a stand-in", ("plain", "other"),
                             open_wrapped, exported=False, exact=("plain",),
                             rows={"cpu": ("plain",)}))
    OPENED.clear()
    yield entry
    RUNTIMES.pop("wrapped")


@pytest.fixture(scope="module")
def tiny(coco128, tmp_path_factory):
    return make_tiny_coco(coco128, tmp_path_factory.mktemp("registry"))


def detections(root: Path) -> list[dict]:
    found = json.loads((root / "results" / "CocoTiny" / "0" / "val" / "results.json").read_text())
    return sorted(found, key=lambda d: (d["image_id"], d["category_id"], -d["score"], d["bbox"]))


def assert_same_detections(got: list[dict], expected: list[dict]) -> None:
    """Equal as decode rows are (reference README section 6): classes and images exact,
    coordinates and scores rtol 1e-5 / atol 1e-5."""
    assert len(got) == len(expected) > 0
    assert [(d["image_id"], d["category_id"]) for d in got] == \
        [(d["image_id"], d["category_id"]) for d in expected]
    np.testing.assert_allclose([d["bbox"] + [d["score"]] for d in got],
                               [d["bbox"] + [d["score"]] for d in expected],
                               rtol=1e-5, atol=1e-5)


def test_test_py_runs_a_runtime_registered_outside_by_name(wrapped, tiny):
    args = ("CocoTiny", "--testiter", 0, "--config-dir", tiny / "configs", "--device", "cpu",
            "--images", IMAGES, "--backend", "none")
    done = inproc("test.py", *args)
    assert done.returncode == 0, done.stderr
    expected = detections(tiny)
    done = inproc("test.py", *args, "--runtime", "wrapped", "--precision", "other")
    assert done.returncode == 0, done.stderr
    assert "(wrapped wrapped other)" in done.stdout  # the label its journal records
    assert len(OPENED) == 1 and OPENED[0].batches >= IMAGES  # test.py's loop ran through it
    assert_same_detections(detections(tiny), expected)


def test_a_precision_the_runtime_has_not_is_one_line_naming_its_own(wrapped, tiny):
    done = inproc("test.py", "CocoTiny", "--testiter", 0, "--config-dir", tiny / "configs",
                  "--device", "cpu", "--images", 1, "--runtime", "wrapped", "--precision",
                  "fp32")
    assert done.returncode == 2
    assert "--precision fp32 is not one of --runtime wrapped's: choose plain or other" \
        in done.stderr
    assert not OPENED


@pytest.mark.slow  # two detectors built, 3 s
def test_the_api_opens_the_registered_runtime_by_name(wrapped, tiny, coco128):
    image = next((coco128 / "images").glob("*.jpg"))
    torch_result = Detector.from_config("CocoTiny", 0, tiny / "configs", device="cpu",
                                        thresh=0.0).detect(_read(image))
    detector = Detector.from_config("CocoTiny", 0, tiny / "configs", device="cpu",
                                    runtime="wrapped", thresh=0.0)
    result = detector.detect(_read(image))
    assert isinstance(detector.network, WrappedTorch) and detector.network.batches == 1
    assert detector.network.precision == "wrapped plain"  # the runtime's first precision
    assert len(result.scores) == len(torch_result.scores) > 0
    np.testing.assert_array_equal(result.classes, torch_result.classes)
    np.testing.assert_allclose(result.boxes, torch_result.boxes, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.scores, torch_result.scores, rtol=1e-5, atol=1e-5)


def test_the_benchmark_offers_the_registered_runtimes_rows(wrapped):
    bench = load_tool("benchmark")
    assert "wrapped:plain" in bench.default_rows("cpu")
    assert "wrapped:plain" not in bench.default_rows("cuda")  # not declared for a GPU
    assert bench.parse_args(["CocoTiny", "--rows", "wrapped:other"]).rows == ("wrapped:other",)


def broken_opener(path: Path, system_config: Any, db_config: dict, device: str, precision: str,
                  raw_weights: bool) -> WrappedTorch:
    raise TypeError("list indices must be integers or slices, not NoneType")


@pytest.mark.slow  # the benchmark's whole run, with its reference row and scoring
def test_the_benchmark_runs_a_registered_runtime_and_shows_a_failing_row_s_traceback(
        wrapped, tiny, capsys):
    register(Runtime("broken", "fails to open", ("x",), broken_opener, exported=False))
    try:
        bench = load_tool("benchmark")
        status = bench.main(["CocoTiny", "--testiter", "0", "--config-dir", str(tiny / "configs"),
                             "--images", "2", "--reps", "1", "--time-size", "64", "--threads",
                             "1", "--device", "cpu", "--rows", "wrapped:plain", "broken:x",
                             "--debug"])
    finally:
        RUNTIMES.pop("broken")
    out, err = capsys.readouterr()
    assert status == 0
    rows = {line.split("|")[1].strip() + ":" + line.split("|")[2].strip(): line
            for line in out.splitlines() if line.startswith(("| wrapped", "| broken"))}
    assert rows["wrapped:plain"].rstrip().endswith("| passed |")  # exact: torch's detections
    assert rows["broken:x"].rstrip().endswith(
        "| failed: list indices must be integers or slices, not NoneType |")
    assert "Traceback" in err and "in broken_opener" in err  # --debug: where it came from


def test_one_place_decides_which_runtime_opens_a_name_or_a_file():
    assert runtime(None).name == "torch"
    assert runtime_of(Path("model.onnx")).name == "onnxruntime"
    assert runtime_of(Path("model.int8.XML")).name == "openvino"
    assert runtime_of(Path("model.onnx"), "openvino").name == "openvino"
    with pytest.raises(UsageError, match="no runtime 'onnxruntim': did you mean 'onnxruntime'"):
        runtime("onnxruntim")
    with pytest.raises(UsageError, match=r"model\.pkl: no runtime opens a \.pkl file alone"):
        runtime_of(Path("model.pkl"))


def test_a_built_in_runtime_s_functions_are_its_module_s_with_the_contract_s_parameters():
    """A function renamed or given other parameters in its module, or an error class it no
    longer raises, fails here, not at a user's first file."""
    for name, module in BUILT_IN.items():
        entry = runtime(name)
        parts = {"open_file": (entry.open_file, 6), "read_metadata": (entry.read_metadata, 1),
                 "int8": (entry.int8.quantize if entry.int8 else None, 6)}  # Opener, Quantizer
        for part, (later, count) in parts.items():
            if later is None:  # torch reads no exported file
                continue
            assert isinstance(later, Later), (name, part)  # imported when first called
            function = later.load()
            assert function.__module__ == module.__name__, (name, part)
            assert len(inspect.signature(function).parameters) == count, (name, part)
        assert entry.unavailable and all(getattr(module, kind.__name__) is kind
                                         for kind in entry.unavailable), name


def test_the_torch_runtime_runs_each_precision_it_declares(tiny):
    system_config, db_config = load_config("CocoTiny", tiny / "configs")
    ran = {}
    for precision in runtime("torch").precisions:
        nnet, _ = open_network("torch", system_config, DETECTION(db_config), 0, "cpu",
                               precision=precision)
        ran[precision] = nnet.precision
    assert ran == {"config": None, "fp32": None, "bf16": "bf16", "compile": "compile"}


def test_openvino_s_cpu_settings_take_the_precisions_it_declares():
    for precision in runtime("openvino").precisions:
        assert openvino_runtime.cpu_properties(precision, 2)["INFERENCE_NUM_THREADS"] == 2
    with pytest.raises(UsageError, match="--precision fp32: choose one of f32, default"):
        openvino_runtime.cpu_properties("fp32", 2)


def _read(path: Path) -> np.ndarray:
    import cv2

    return cv2.imread(str(path))


EMPTY = "precisions must be a tuple of at least one name (the first is the default), got "
NAME = ("a name is letters, digits, '_', '.' and '-' (it is --runtime's value and the first "
        "half of a benchmark row 'runtime:precision')")


@pytest.mark.parametrize("name, precisions, says", [
    ("no-precision", (), EMPTY + "()"),
    ("one-string", "fp32", EMPTY + "'fp32'"),
    ("has:colon", ("fp32",), NAME),
    ("odd-precision", ("fp:32",), ("precision 'fp:32' is not a name (letters, digits, '_', "
                                   "'.', '-')")),
])
def test_register_refuses_a_runtime_that_could_not_run_at_the_call(name, precisions, says):
    with pytest.raises(ValueError) as caught:
        register(Runtime(name, "a mistake", precisions, open_wrapped, exported=False))
    assert str(caught.value) == f"runtime {name!r}: {says}"
    assert name not in RUNTIMES

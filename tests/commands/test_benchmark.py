"""tools/benchmark.py's device and batch options and its torch rows (fp32, bf16, torch.compile),
on a CornerNet_Tiny snapshot of coco128; no export (torch rows only)."""

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from _onnx import spread_weights
from _tiny_coco import ROOT, make_tiny_coco
from _tools import load_tool

from core.config import load_config
from core.dbs import datasets
from core.deploy import measure
from core.deploy.comparison import BenchmarkReport
from core.inference.cornernet import network_input
from core.nnet.py_factory import NetworkFactory
from core.utils.threads import usable_cpus


@pytest.fixture(scope="module")
def bench_tool():
    return load_tool("benchmark")


@pytest.fixture(scope="module")
def snapshot(coco128, tmp_path_factory):
    """configs/CocoTiny.json and its snapshot 0, with weights that give real detections."""
    root = make_tiny_coco(coco128, tmp_path_factory.mktemp("bench"))
    system_config, db_config = load_config("CocoTiny", root / "configs")
    db = datasets["COCO"](db_config, split="val", sys_config=system_config)
    nnet = NetworkFactory(system_config, db, device="cpu")
    spread_weights(nnet.model)
    nnet.save_params(0)
    return root


def argv_of(root, *more):
    return ["CocoTiny", "--testiter", "0", "--config-dir", str(root / "configs"), "--images",
            "2", "--reps", "1", "--time-size", "127", *more]


def test_columns_are_thread_counts_on_a_cpu_and_batch_sizes_on_a_gpu():
    cpu, gpu = torch.device("cpu"), torch.device("cuda:0")
    assert measure.timings(cpu, [1, 2], [1]) == [("1", 1, 1), ("2", 2, 1)]
    assert measure.timings(cpu, [1, 2], [1, 8]) == [
        ("1", 1, 1), ("1/b8", 1, 8), ("2", 2, 1), ("2/b8", 2, 8)]
    assert measure.timings(gpu, [1, 16], [1, 8]) == [("b1", 16, 1), ("b8", 16, 8)]
    header = BenchmarkReport((), ("1", "1/b8", "b1", "b8"), "", "").table().splitlines()[0]
    assert "| ms @1 thr | ms/img @1 thr batch 8 | ms/img @batch 1 | ms/img @batch 8 |" in header


class Fixed:
    """A network whose every call takes the same time, whatever the batch."""

    device = torch.device("cpu")

    def __init__(self, seconds):
        self.seconds, self.shapes = seconds, []

    def test(self, images, **kwargs):
        self.shapes.append(tuple(images.shape))
        self.channels_last = images.is_contiguous(memory_format=torch.channels_last)
        time.sleep(self.seconds)
        return (torch.zeros(len(images), 1, 8),)


def test_a_batch_is_timed_per_image():
    nnet = Fixed(0.08)
    image = torch.rand(1, 3, 31, 47)
    one = measure.ms_per_image(nnet, image, 1, {}, reps=2)
    eight = measure.ms_per_image(nnet, image, 8, {}, reps=2)
    assert nnet.shapes == [(1, 3, 31, 47)] * 3 + [(8, 3, 31, 47)] * 3  # a warm-up, 2 runs
    assert 80 <= one < 200  # a call's time (a loaded machine sleeps longer, never shorter)
    assert 10 <= eight < 25  # the same call's time over 8 images


def test_the_timed_batch_keeps_the_layout_test_py_feeds():
    """network_input gives channels-last memory, and the timed batch keeps it: CPU
    convolutions take another path for each layout (CornerNet_Tiny in bf16 autocast: 260 ms
    channels-last, 2577 ms in plain layout, which test.py never feeds)."""
    nnet = Fixed(0)
    canvas = np.zeros((1, 31, 47, 3), np.uint8)
    image = network_input(canvas, (0.4, 0.4, 0.4), (0.3, 0.3, 0.3), "cpu")
    assert image.is_contiguous(memory_format=torch.channels_last)
    for batch in (1, 8):
        measure.ms_per_image(nnet, image, batch, {}, reps=1)
        assert nnet.shapes[-1] == (batch, 3, 31, 47) and nnet.channels_last
    measure.ms_per_image(nnet, image.contiguous(), 8, {}, reps=1)
    assert not nnet.channels_last  # the layout of the image it is given


def test_a_gpu_is_synchronised_before_and_after_each_timed_run(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("sync"))
    measure.median_seconds(lambda: calls.append("run"), 2, torch.device("cuda:0"))
    assert calls == ["run", "sync", "run", "sync", "sync", "run", "sync"]
    calls.clear()
    measure.median_seconds(lambda: calls.append("run"), 2, torch.device("cpu"))
    assert calls == ["run"] * 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_rows_without_a_gpu_are_not_available_and_exit_0(bench_tool, snapshot, tmp_path,
                                                              capsys):
    rows_json = tmp_path / "rows.json"
    assert bench_tool.main(argv_of(snapshot, "--device", "cuda", "--json", str(rows_json))) == 0
    rows = json.loads(rows_json.read_text())
    assert [(r["runtime"], r["precision"]) for r in rows] == [
        ("torch", "fp32"), ("torch", "bf16"), ("torch", "compile")]  # a GPU's rows
    for row in rows:
        assert row["check"].startswith("not available: --device cuda: this machine has no "
                                       "usable GPU")
        assert row["AP"] is None and row["ms"] == {}
    assert "| torch | compile | - | - |" in capsys.readouterr().out
    # ... unless --min-ap was asked of rows named
    assert bench_tool.main(argv_of(snapshot, "--device", "cuda", "--rows", "torch:fp32",
                                  "--min-ap", "0")) == 1


@pytest.mark.slow  # the tool's own process
def test_the_command_line_without_a_gpu_exits_0(snapshot):
    """The same as a script (`cornernet benchmark` runs it so): the table, exit 0."""
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "benchmark.py"),
                           *argv_of(snapshot, "--device", "cuda", "--rows", "torch:compile")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "| torch | compile |" in done.stdout and "not available: --device cuda" in done.stdout


@pytest.mark.slow  # two rows on two images: seconds
def test_a_compile_row_without_a_compiler_is_not_available(bench_tool, snapshot, tmp_path,
                                                          monkeypatch):
    """Where inductor cannot compile (no C++ compiler) the torch.compile row says so and the
    other rows run. The failure is dynamo's, as a missing compiler raises it at the first call
    (tracing CornerNet_Tiny up to the real compiler call takes minutes on 2 cores)."""
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import InvalidCxxCompiler

    def no_compiler(model):
        def call(*args, **kwargs):
            raise BackendCompilerFailed(no_compiler, InvalidCxxCompiler(), None)
        return call

    monkeypatch.setattr(torch, "compile", no_compiler)
    rows_json = tmp_path / "rows.json"
    argv = argv_of(snapshot, "--device", "cpu", "--threads", "1", "--rows", "torch:fp32",
                   "torch:compile", "--json", str(rows_json))
    assert bench_tool.main(argv) == 0
    fp32, compiled = json.loads(rows_json.read_text())
    assert fp32["check"] == "passed" and fp32["ms"]["1"] > 0
    assert compiled["check"].startswith("not available: torch.compile cannot run here: ")
    assert "InvalidCxxCompiler" in compiled["check"]
    assert compiled["AP"] is None and compiled["ms"] == {}


def inductor_runs():
    """Whether torch.compile's inductor can compile for this CPU (it needs a C++ compiler)."""
    try:
        torch.compile(torch.nn.Linear(2, 2))(torch.ones(1, 2))
    except Exception:  # noqa: BLE001 - any reason is a reason to skip
        return False
    return True


@pytest.mark.slow  # bf16 autocast on a CPU without bf16 units: about 7x fp32's time
def test_torch_rows_at_batch_1_and_8(bench_tool, snapshot, tmp_path, monkeypatch):
    rows_json = tmp_path / "rows.json"
    argv = argv_of(snapshot, "--device", "cpu", "--threads", "1", "--batch", "1", "8",
                   "--rows", "torch:fp32", "torch:bf16", "--json", str(rows_json))
    timed = measure.ms_per_image
    layouts = []

    def ms_per_image(nnet, image, *args, **kwargs):
        layouts.append(image.is_contiguous(memory_format=torch.channels_last))
        return timed(nnet, image, *args, **kwargs)

    monkeypatch.setattr(measure, "ms_per_image", ms_per_image)
    assert bench_tool.main(argv) == 0
    fp32, bf16 = json.loads(rows_json.read_text())
    for row in (fp32, bf16):
        assert set(row["ms"]) == {"1", "1/b8"} and row["ms"]["1/b8"] > 0
        assert row["size_mb"] == fp32["size_mb"] > 1
    assert fp32["check"] == bf16["check"] == "passed"
    assert layouts == [True] * 4  # timed in the layout test.py feeds (two rows, two batches)


@pytest.mark.slow  # inductor compiles CornerNet_Tiny's test path, once: a minute cold on 2 cores
@pytest.mark.timeout(900)
def test_compile_gives_eager_detections(bench_tool, coco128, tmp_path):
    # One input shape, so one compile (each costs a minute cold; a second shape also made it
    # recompile with dynamic shapes): no flipped copy beside the image (test.py's batch of two),
    # and the timed input is the canvas test.py feeds the one image evaluated (no --time-size).
    # The threads are the usable CPUs', the count opening a network sets (torch's compiled
    # graph is guarded on the thread count: timed on others, evaluation would compile again).
    root = make_tiny_coco(coco128, tmp_path, test_flipped=False)
    rows_json = tmp_path / "rows.json"
    threads = str(usable_cpus())
    argv = argv_of(root, "--device", "cpu", "--threads", threads, "--rows", "torch:fp32",
                   "torch:compile", "--json", str(rows_json))
    argv[argv.index("--images") + 1] = "1"
    at = argv.index("--time-size")
    del argv[at:at + 2]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    assert bench_tool.main(argv) == 0
    counted = torch._dynamo.utils.counters
    breaks, graphs = dict(counted["graph_break"]), counted["stats"]["unique_graphs"]
    fp32, compiled = json.loads(rows_json.read_text())
    if not inductor_runs():
        assert compiled["check"].startswith("not available: torch.compile cannot run here")
        return
    # check "passed": its detections on the first image equal eager's within the parity
    # tolerance of shared/reference/README.md section 6; and so does the AP of that image.
    assert compiled["check"] == "passed" and compiled["ms"][threads] > 0
    assert fp32["AP"] is not None and compiled["AP"] == pytest.approx(fp32["AP"], abs=1e-3)
    # Nothing breaks the graph: not the corner search's `float()` of a tensor, nor the test
    # loop's timing hooks (each printed a warning and split it), nor since issue 43 the
    # ordered top-k (its `nonzero` did, silently): the test path compiles as one graph, once.
    assert not breaks, breaks
    assert graphs == 1

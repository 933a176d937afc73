"""Every script in bench/ and tools/ runs to its end with its smallest settings, so that a rename
or a stricter rule in core/ cannot break one silently (bench_test.py once stopped on a config the
rules had come to refuse).

The scripts run in this process (tests/_inproc.py) as `python bench/<name>.py` would run them,
their folder first on the import path, one torch thread: a process of their own would import
torch again, nearly all of what the smaller ones cost. The processes a script starts itself
(test.py, train.py, `python -m cornernet`, its busy neighbours) are real ones.
"""

from __future__ import annotations

import contextlib
import json
import sys

import cv2
import pytest

from tests._inproc import run_script as run_inproc
from tests._tiny_coco import ROOT, script_env

pytestmark = pytest.mark.slow

# script, arguments, the line(s) of its output that say it got to its figures
RUNS = {
    # torch:fp32 only: the export and onnxruntime rows of tools/benchmark.py are proven by
    # test_deploy.py (test_benchmark_rows_json_and_a_missing_runtime), the export itself
    # by test_onnx_export.py; this run is for bench_deploy's own `random_snapshot`.
    "bench_coco_parse": (["--scale", "0.01"], ("| ours, first parse (empty cache) |",
                                                "| pycocotools COCO(file) |")),
    "bench_deploy": (["--configs", "CornerNet_Tiny", "--size", "127", "--threads", "1",
                      "--reps", "1", "--images", "1", "--rows", "torch:fp32"],
                     "| torch | fp32 |"),
    "bench_help": (["--reps", "1"], ("analyze results", "load average: ")),
    # one thread: its batch of 16 took 5 times the CPU on two threads of a busy machine
    "bench_models": (["--models", "CornerNet_Tiny", "--reps", "1", "--threads", "1"],
                     "CornerNet_Tiny     cpu fwd+bwd 128x128"),
    "bench_preempt": (["--trials", "1", "--after", "1", "--batch", "2"],
                      "median: snapshot on disk"),
    "bench_prefetch": (["--batches", "2", "--batch-size", "2", "--tiny-iters", "2",
                        "--workers", "2", "--eval-images", "2"],
                       ("CornerNet_Squeeze  workers=2:", "CornerNet          workers=2:",
                        "CornerNet_Tiny CPU training (2 iterations): waiting for data ")),
    "bench_ring": (["--batches", "2", "--batch-size", "2", "--repeats", "1", "--build-ms", "1",
                    "--workers", "1"],
                   ("CornerNet_Saccade  timed, batch 48 workers=1",
                    "CornerNet_Saccade  coco128, batch 2 workers=1")),
    "bench_sampler": (["--batches", "1", "--batch", "2"], "CornerNet_Saccade"),
    "bench_shapes_generation": (["--train", "4", "--val", "2"], "generated 6 images"),
    "bench_test": (["--images", "2", "--repeats", "1"], "test.py CornerNet_Tiny on CPU"),
    # one busy neighbour: its rows' code (started, killed, waited for) runs at the least cost
    "bench_threads": (["--images", "2", "--busy", "1"], ("default, 1 busy processes beside",
                                                         "ms/image")),
    "bench_train": (["--tiny", "--configs", "CornerNet_Squeeze", "--modes", "fp32", "--workers",
                     "1", "--iters", "1", "--warmup", "1", "--breakdown-reps", "1", "--device",
                     "cpu"], "one step of 2 images"),
}


def run_script(path, *args, **env):
    """`python <path> <args>` in this process, with the environment of a script run (this
    checkout first on the import path of the processes it starts) and `env` on top."""
    with script_folder_first(path.parent):
        return run_inproc(path, *args, env=script_env(OMP_NUM_THREADS="1", **env))


# bench's module that reads where coco128 is (CORNERNET_DATA) when it is imported
READ_AT_IMPORT = ("_coco128", "bench._coco128")


@contextlib.contextmanager
def script_folder_first(folder):
    """The import path as `python <folder>/<script>.py` has it, its folder first (where a bench
    script finds `_checkout` and `_coco128`), and `_coco128` imported anew, from the run's
    environment; those and OpenCV's thread count (bench_test sets it) put back after."""
    path, threads = list(sys.path), cv2.getNumThreads()
    modules = {name: sys.modules.pop(name) for name in READ_AT_IMPORT if name in sys.modules}
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path[:] = path
        cv2.setNumThreads(threads)
        for name in READ_AT_IMPORT:
            sys.modules.pop(name, None)
        sys.modules.update(modules)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_bench_script_runs_to_its_figures(name, coco128):
    args, says = RUNS[name]
    # the set the tests found (the full coco128, else the repository's subset), named to the
    # script as a benchmark is told where its data is
    done = run_script(ROOT / "bench" / f"{name}.py", *args, CORNERNET_DATA=str(coco128))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    for line in (says,) if isinstance(says, str) else says:
        assert line in done.stdout, done.stdout[-2000:]
    assert "(no summary" not in done.stdout, done.stdout[-2000:]  # bench_prefetch's train.py


def test_plot_metrics_draws_a_metrics_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"iteration": i, "loss": 2.0 / i, "focal": 1.0 / i,
                                        "terms": ["focal"], "lr": 0.001}) + "\n"
                            for i in range(1, 6)))
    done = run_script(ROOT / "tools" / "plot_metrics.py", path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "metrics.png").stat().st_size > 0


def test_bench_buckets_runs_to_its_figures(tmp_path, coco128):
    """bench_buckets on a fresh CornerNet_Tiny's snapshot (4 Shapes classes, random weights)
    and a Shapes set of 4 + 2 images: its three comparisons' lines."""
    from types import SimpleNamespace

    import torch

    from core.config import load_config
    from core.nnet.py_factory import NetworkFactory

    system, db = load_config("CornerNet_Tiny", overrides=[
        f"system.cache_dir={tmp_path / 'cache'}", f"system.data_dir={tmp_path / 'data'}",
        "db.num_train_images=4", "db.num_val_images=2"])
    torch.manual_seed(0)
    snapshot = NetworkFactory(system, SimpleNamespace(configs=db), device="cpu").save_params(1)
    done = run_script(ROOT / "bench" / "bench_buckets.py", "--snapshot", snapshot,
                      "--data-dir", tmp_path / "data", "--images", "2",
                      "--coco128", coco128)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    for says in ("GPU buckets", "every canvas moved", "coco128 val, GPU buckets"):
        assert says in done.stdout, done.stdout[-2000:]


# Scripts whose own tests run them as processes: tests/commands/test_analyze_model.py,
# test_analyze_results.py, test_gpu_check.py (which needs no GPU to start it) and
# test_slurm.py (submit.py, on the real SLURM the tests start), test_onnx_export.py;
# and the tools whose tests run their `main` in-process: test_check_data.py (check_data),
# test_yolo_voc.py (convert), test_deploy.py (benchmark); bench_buckets above;
# bench_syncs and bench_decode_syncs (their `main` in tests/bench/test_bench_syncs.py and
# test_bench_decode_syncs.py), bench_test_shapes (test_bench_test_shapes.py) and
# bench_step (gpu_check's rehearsal runs its sync group, tests/bench/test_gpu_check.py).
RUN_ELSEWHERE = {"tools/analyze_model.py", "tools/analyze_results.py", "bench/gpu_check.py",
                 "tools/submit.py", "tools/export.py", "tools/check_data.py", "tools/convert.py",
                 "tools/benchmark.py", "bench/bench_buckets.py", "bench/bench_syncs.py",
                 "bench/bench_decode_syncs.py", "bench/bench_step.py",
                 "bench/bench_test_shapes.py"}


def test_every_script_of_bench_and_tools_is_covered():
    covered = {f"bench/{name}.py" for name in RUNS} | {"tools/plot_metrics.py"} | RUN_ELSEWHERE
    found = {str(p.relative_to(ROOT)) for folder in ("bench", "tools")
             for p in (ROOT / folder).glob("*.py") if not p.name.startswith("_")}
    assert found == covered, f"a script without a smoke run: {sorted(found - covered)}"

"""Shared fixtures: the real data (CORNERNET_DATA, ../shared or ./shared, as tests/_data.py
finds it), a small thread budget for CPU tests, and the groups that keep a shared fixture on one
worker when the suite runs in parallel (pytest-xdist's `-n auto`, dealt by loadgroup: set here,
not in pyproject's addopts, which pytest without pytest-xdist would refuse)."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest
import torch
from _data import coco128_dir, looked_in, reference_dir
from _onnx import spread_export  # noqa: F401 - one ONNX export, session-scoped
from _slurm import slurm  # noqa: F401 - a single-node SLURM cluster, session-scoped

# submitit configures logging at its first import (logging.config.dictConfig), which closes
# every logging handler alive at that moment. absl's handler (imported with openvino and nncf)
# then closes its stream: the sys.stderr of its own import, which under pytest is the capture
# file of the whole session, so every later test of that process fails ("I/O operation on
# closed file"). Imported here, first, submitit finds no such handler.
with contextlib.suppress(ImportError):
    import submitit  # noqa: F401

COCO128 = coco128_dir(subset=True)  # the full set, else the repository's 28 images
REFERENCE = reference_dir()

# Two threads for a serial run; one per worker under pytest-xdist (a worker per core, and one).
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, (os.cpu_count() or 1) // WORKERS))
torch.set_num_threads(THREADS)
# Under pytest-xdist every core has its worker: inductor's pool of compile processes (each
# imports torch, a few CPU-seconds) would only contend with them. Compile in-process instead
# (read when torch._inductor.config is first imported; the tests' subprocesses inherit it).
if WORKERS > 1:
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# Inductor's CPU kernels in scalar C++, not vectorised (set TORCHINDUCTOR_VEC_ISA_OK=1 to test
# those): the suite's two compiles (the tiny training step, benchmark's test path) took 145
# s of CPU cold on 2 cores, 108 s so, most of it gcc. What they check is this project's compile
# path, its graph and its numbers against eager's; compiling is on by default only on a GPU,
# whose kernels are Triton's, and the vector width is inductor's own code.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")
# On a CPU-only torch, also compile each graph as one C++ module (its kernels and a C++ wrapper)
# at -O0: the training step's 60 kernels were 60 compiles and links of 0.7 s each, and the pair
# took 106 CPU-s so, 61 this way. Both are inductor's own modes; a CUDA build keeps its defaults.
if torch.version.cuda is None:
    os.environ.setdefault("TORCHINDUCTOR_CPP_WRAPPER", "1")
    os.environ.setdefault("TORCHINDUCTOR_DEBUG_COMPILE", "1")

# Session fixtures too costly to build once per worker: every test that uses one runs on the
# worker that built it (and the SLURM tests keep one cluster, as in a serial run).
SHARED = ("slurm", "spread_export")
# Tests that run best one after the other on one worker: inductor pays its first compile's
# one-time costs (a precompiled header in /tmp/torchinductor_$USER: about 30 s of CPU) once
# when the two do not run at once.
TOGETHER = {"inductor": ("tests/core/nnet/test_compiled.py::test_compiling_the_tiny_step",
                         "tests/commands/test_benchmark.py::test_compile_gives_eager_detections")}


# Seconds of the tests that take longest, as one worker of `-n auto` on 2 cores ran them (issue
# 45's measurements; a prefix of a test id names all its tests). Under pytest-xdist the costliest
# groups and tests start first, so that the last to end is a short one; a slow test not named
# here counts SLOW, any other FAST. The numbers order the tests and nothing else.
KNOWN = {
    "tests/process/test_slurm.py::test_a_time_limit": 45,
    "tests/process/test_slurm.py::test_scancel_usr1": 1,
    "tests/process/test_slurm.py::test_submitit_requeues": 37,
    "tests/process/test_slurm.py::test_template_with_two_tasks": 45,
    "tests/process/test_slurm.py::test_scancel_of_a_job": 18,
    "tests/process/test_slurm.py": 15,
    "tests/core/nnet/test_compiled.py::test_compiling_the_tiny_step": 110,
    "tests/commands/test_benchmark.py::test_compile_gives_eager_detections": 90,
    "tests/bench/test_gpu_check.py::test_the_rehearsal_passes": 55,
    "tests/process/test_elastic.py::test_a_killed_rank": 45,
    # first of the spread_export group: it pays the session's export (16 s) besides its own two
    "tests/api/test_export_api.py::test_detector_and_api_exports": 48,
    "tests/api/test_names_travel.py::test_an_exported_file": 11,
    "tests/core/deploy/test_deploy.py": 1.5,
    "tests/core/deploy/test_onnx_raw_weights.py": 3,
    "tests/commands/test_data_runs.py": 3,
    "tests/commands/test_data_runs.py::test_a_run_is_tested_on_another_export": 8,
    "tests/process/test_distributed.py": 15,
    "tests/bench/test_scripts.py::test_bench_script_runs_to_its_figures[bench_prefetch]": 12,
    "tests/bench/test_scripts.py::test_bench_script_runs_to_its_figures[bench_models]": 3,
    "tests/bench/test_scripts.py::test_bench_script_runs_to_its_figures[bench_threads]": 16,
    "tests/commands/test_train.py::test_two_gloo_processes": 18,
    "tests/core/models/test_models.py::test_test_path_returns": 4,
    "tests/core/deploy/test_onnx_export.py": 0.7,
}
SLOW, FAST = 5.0, 0.3


@pytest.hookimpl(optionalhook=True)  # pytest without pytest-xdist must still start
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker per CPU this process may use (xdist's own count is of physical
    cores, 1 on a 2-vCPU machine with hyperthreads). Not one more: a third worker on 2 CPUs
    made the timed tests (the gpu_check rehearsal's budget) fail under the load it adds. At
    most 8: each worker holds torch."""
    return max(2, min(8, len(os.sched_getaffinity(0))))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Tell each worker how the controller deals: a worker parses the command line again, where
    `-n N` names no --dist, so it would not know of the loadgroup chosen below."""
    node.workerinput["dist"] = node.config.option.dist


def pytest_configure(config) -> None:
    """`-n N` without a `--dist` of the caller's deals by loadgroup (xdist's own default, load,
    would split the groups below). Runs after xdist's pytest_cmdline_main chose load for -n.

    A worker collects, so it is the worker that must order the tests (`costliest_first`) and
    name their groups in their ids (xdist does so where `config.option.loadgroup`, which it sets
    from the worker's own command line: false under a bare `-n`, which split every group)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        config.option.loadgroup = workerinput.get("dist") == "loadgroup"
        return
    args = config.invocation_params.args
    asked = any(arg == "--dist" or arg.startswith("--dist=") for arg in args)
    if getattr(config.option, "dist", "no") == "load" and not asked:
        config.option.dist = "loadgroup"
    if getattr(config.option, "dist", "no") == "loadgroup":
        # the order `costliest_first` gives, not xdist's own (the groups with most tests first)
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The opt-in tests (marker `export_all`) are deselected unless CORNERNET_EXPORT_ALL=1: the
    summary counts them as deselected, not as skipped for a missing GPU, NCCL or SLURM.

    Under `--dist loadgroup`, a test goes to the worker of its group: the one of a costly
    session fixture it uses, else its module when it uses a module-scoped fixture (built once
    per module then, as in a serial run). Other tests are dealt one by one."""
    if os.environ.get("CORNERNET_EXPORT_ALL") != "1":
        opted = [item for item in items if item.get_closest_marker("export_all")]
        if opted:
            config.hook.pytest_deselected(items=opted)
            items[:] = [item for item in items if item not in opted]
    for item in items:
        group = worker_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    if getattr(config.option, "loadgroup", False):  # a worker's collection, dealt by group
        items[:] = costliest_first(items)


def cost(item) -> float:
    """What `item` is expected to take (KNOWN), in seconds."""
    named = [prefix for prefix in KNOWN if item.nodeid.startswith(prefix)]
    if named:
        return KNOWN[max(named, key=len)]
    return SLOW if item.get_closest_marker("slow") else FAST


def costliest_first(items: list) -> list:
    """The tests in the order xdist should deal them: each worker group (or test) by its
    expected seconds, most first; a group's tests keep their order."""
    groups: dict[str, list] = {}
    for item in items:
        marker = item.get_closest_marker("xdist_group")
        groups.setdefault(marker.args[0] if marker else item.nodeid, []).append(item)
    ranked = sorted(groups.values(), key=lambda group: -sum(map(cost, group)))
    return [item for group in ranked for item in group]


def worker_group(item) -> str | None:
    for group, prefixes in TOGETHER.items():
        if item.nodeid.startswith(prefixes):
            return group
    names = getattr(item, "fixturenames", ())
    shared = [name for name in SHARED if name in names]
    if shared:
        return shared[0]
    info = getattr(item, "_fixtureinfo", None)
    for name in names:
        defs = info.name2fixturedefs.get(name) if info else None
        if defs and defs[-1].scope == "module":
            return item.path.stem
    return None


@pytest.fixture(autouse=True)
def _thread_budget():
    """Each test starts with the suite's torch threads. `Detector` and the commands a test runs
    in this process set torch's count to the usable CPUs, as they do in a user's program, and
    the process keeps it: a worker of `-n auto` then ran the tests after it on two threads
    beside the other worker, more threads than the cores (525 of the suite's tests started
    so; in-process training tests of 2-3 s took 25-40 s in some CI runs)."""
    if torch.get_num_threads() != THREADS:
        torch.set_num_threads(THREADS)


@pytest.fixture(scope="session")
def coco128():
    """Real COCO images with their original annotations, in coco128's layout: the 128 of the
    full set where one is found, else the repository's 28 (tests/data/coco128-mini). A test
    derives the counts it asserts from the annotation files (tests/_coco_counts.py)."""
    if COCO128 is None:
        pytest.skip(f"real data not found; looked in {looked_in()} (CORNERNET_DATA names a "
                    "folder without coco128; unset it to use tests/data/coco128-mini)")
    return COCO128


@pytest.fixture(scope="session")
def reference():
    """Parity vectors from the original code; tests skip when none are found."""
    if REFERENCE is None:
        pytest.skip(f"parity references not found; looked in {looked_in()}")
    return REFERENCE


@pytest.fixture(scope="session")
def tiny_db(coco128, tmp_path_factory):
    """The coco128 training split as CornerNet_Tiny's dataset (80 classes)."""
    from tests._dense_reference import coco128_db
    return coco128_db(coco128, "CornerNet_Tiny", tmp_path_factory.mktemp("dbs"), categories=80)


@pytest.fixture
def named_run(tmp_path):
    """A CornerNet_Tiny run over two pictures whose classes have names and ids of their own
    (tests/_tiny_coco.py's NAMES and IDS), with its snapshot 0: the run folder (`tmp_path`/run)
    with configs/Names.json."""
    from _tiny_coco import named_run
    return named_run(tmp_path / "run")


@pytest.fixture
def restore_handlers():
    """The stop and resume signals' handlers as they were before the test (a test that makes a
    StopRequest or runs `launch` in-process installs its own)."""
    from core.engine import stop as stops
    saved = {s: signal.getsignal(s) for s in (*stops.STOPS, *stops.CANDIDATES)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)

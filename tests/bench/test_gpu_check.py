"""bench/gpu_check.py without a GPU: one line and exit 2; its data discovery, configs, step
selection, budget and streaming log; the CPU rehearsal of the whole run; bench/gpu_prep.sh."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import _data
import pytest
import torch
from _coco_counts import facts
from _inproc import run_script

from bench import _rehearsal
from bench._plan import GROUPS, PLAN_S, Context, bench, bench_step, deploy_gpu, in_plan
from bench._steps import Steps
from bench.gpu_check import CONFIGS, REPO, parse_args, select, write_configs
from core.config import load_config
from core.dbs import datasets


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_without_a_gpu_it_stops_at_once_in_one_line():
    done = run_script("bench/gpu_check.py")  # in this process; the rehearsal is its process
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
            assert len(db.db_inds) == facts(coco128, db.annotation_file.name).images > 0


def test_without_coco128_every_config_trains_on_generated_shapes(tmp_path):
    folder = write_configs(tmp_path, None)
    for name in CONFIGS:
        system_config, db_config = load_config(name, folder)
        assert system_config.dataset == "Shapes" and db_config["categories"] == 4
        assert system_config.batch_size == load_config(name)[0].batch_size


def make_shared(root: Path) -> Path:
    coco = root / "data" / "coco128"
    (coco / "annotations").mkdir(parents=True)
    (coco / "annotations" / "instances_coco128.json").write_text("{}")
    return coco


def test_data_is_found_in_the_variable_then_beside_then_inside_the_checkout(tmp_path,
                                                                           monkeypatch):
    checkout = tmp_path / "checkout"
    monkeypatch.setattr(_data, "REPO", checkout)
    monkeypatch.delenv(_data.ENV, raising=False)
    assert _data.coco128_dir() is None
    inside = make_shared(checkout / "shared")
    assert _data.coco128_dir() == inside  # ./shared: what travels to a GPU machine
    beside = make_shared(tmp_path / "shared")
    assert _data.coco128_dir() == beside  # ../shared first
    named = make_shared(tmp_path / "elsewhere")
    monkeypatch.setenv(_data.ENV, str(tmp_path / "elsewhere"))
    assert _data.coco128_dir() == named
    monkeypatch.setenv(_data.ENV, str(named))  # the coco128 folder itself
    assert _data.coco128_dir() == named
    monkeypatch.setenv(_data.ENV, str(tmp_path / "missing"))  # said, not passed over
    assert _data.coco128_dir() is None
    assert str(tmp_path / "missing") in _data.looked_in()


def test_only_and_skip_pick_groups_in_plan_order_with_what_they_need():
    assert select(["test-squeeze"], [], gpus=1) == ["train-squeeze", "test-squeeze"]
    assert select(["test-squeeze-b8"], [], gpus=1) == ["train-squeeze", "test-squeeze-b8"]
    assert select(["bench-*"], ["bench-cornernet"], gpus=1) == [
        "bench-squeeze", "bench-squeeze-more", "bench-tiny", "bench-saccade"]
    everything = select([], [], gpus=1)
    assert everything[:6] == ["cuda-tests", "train-saccade", "test-saccade", "train-cornernet",
                              "test-cornernet", "deterministic"]
    assert "train-2gpu" not in everything and "train-2gpu" in select([], [], gpus=2)
    with pytest.raises(ValueError, match="no step group matches 'trian-\\*'"):
        select(["trian-*"], [], gpus=1)


@pytest.mark.slow  # 5 s on 2 idle cores: the "not slow" loop keeps under 2 minutes
def test_a_budget_cuts_a_long_step_refuses_the_rest_and_every_row_is_logged_as_it_ends(
        tmp_path):
    log = tmp_path / "out" / "check.log"
    steps = Steps(tmp_path, budget=6.0, log=log, reserve=1.0)
    t0 = time.monotonic()
    assert steps.run("quick", [sys.executable, "-c", "print('fine')"], timeout=60, need=0.5)
    assert log.read_text().splitlines()[-1] == "| quick | ok | 0 | fine |"  # before the next
    long = ("import sys, time; print('partial figure', file=sys.stderr, flush=True); "
            "time.sleep(60)")
    assert steps.run("long", [sys.executable, "-c", long], timeout=60, need=1.0) is None
    assert steps.run("later", [sys.executable, "-c", "pass"], timeout=60, need=1.0) is None
    steps.say(steps.table(["header"]))
    seconds = time.monotonic() - t0
    assert seconds < 6.0  # the table is out before the deadline
    text = log.read_text()
    assert "| long | cut (budget) |" in text
    assert "    partial figure" in text  # a cut step's stderr is kept
    assert "| later | not run (budget) | 0 | expects about 1 s" in text
    assert [row.status for row in steps.rows] == ["ok", "cut (budget)", "not run (budget)"]
    assert not steps.failed


def test_a_failed_step_keeps_its_stderr_and_fails_the_run(tmp_path):
    steps = Steps(tmp_path, log=tmp_path / "check.log")
    code = "import sys; print('why it broke', file=sys.stderr); sys.exit(3)"
    assert steps.run("broken", [sys.executable, "-c", code], timeout=60, need=0) is None
    assert steps.rows[0].status == "FAIL (3)" and steps.failed
    assert "why it broke" in (tmp_path / "check.log").read_text()


class CannedSteps(Steps):
    """Answers a step with bench_train's own row format instead of running it."""

    def run(self, name, cmd, timeout, need, measure=None, env=None):
        self.cmd = [str(part) for part in cmd]
        self.add(name, "ok", 1.0, measure("") if measure else "")
        return ("device cuda:0 (H100), ...\n"
                "config             mode             workers  images/s data wait peak GiB\n"
                f"{'CornerNet_Squeeze':18s} {'bf16+cl':16s} {8:7d} {412.5:9.1f} "
                f"{1.2:8.1f}% {9.87:8.2f}\n"
                f"{'CornerNet_Squeeze':18s} {'fp32':16s} {8:7d} out of memory at batch 16\n")


def test_bench_rows_become_table_rows_from_30_timed_iterations(tmp_path, coco128):
    steps = CannedSteps(tmp_path)
    ctx = Context(steps=steps, py="python", device="cuda", root=tmp_path, coco128=coco128,
                  backend="faster", gpus=1, tiny=False, configs=tmp_path,
                  workers=dict.fromkeys(CONFIGS, 8), write_configs=write_configs)
    bench("CornerNet_Squeeze", ("bf16+cl", "fp32"), 67)(ctx)
    assert steps.cmd[steps.cmd.index("--iters") + 1] == "30"
    assert [row[:2] for row in steps.rows[1:]] == [
        ("  CornerNet_Squeeze bf16+cl, batch 16", "ok"),
        ("  CornerNet_Squeeze fp32, batch 16", "out of memory")]
    assert steps.rows[1].detail == "412.5 images/s, data wait 1.2%, peak 9.87 GiB (8 workers)"


class CannedBenchmark(Steps):
    """Answers a step with tools/benchmark.py's own table on a GPU instead of running it."""

    def run(self, name, cmd, timeout, need, measure=None, env=None):
        self.cmd = [str(part) for part in cmd]
        self.add(name, "ok", 1.0, measure("") if measure else "")
        return ("device: cuda:0 (NVIDIA H100 80GB HBM3), torch 2.13.0, CUDA 12.8; batch 1 and 8\n"
                "| runtime | precision | AP | AP50 | ms/img @batch 1 | ms/img @batch 8 | size MB "
                "| check |\n|---|---|---|---|---|---|---|---|\n"
                "| torch | fp32 | 0.000 | 0.000 | 21.4 | 6.2 | 121.5 | passed |\n"
                "| torch | bf16 | 0.000 | 0.000 | 15.0 | 3.1 | 121.5 | passed |\n"
                "| torch | compile | - | - | - | - | 121.5 | not available: torch.compile "
                "cannot run here: no compiler |\n")


def test_the_deploy_rows_become_table_rows_at_batch_1_and_8(tmp_path, coco128):
    steps = CannedBenchmark(tmp_path)
    ctx = Context(steps=steps, py="python", device="cuda", root=tmp_path, coco128=coco128,
                  backend="faster", gpus=1, tiny=False, configs=tmp_path,
                  workers=dict.fromkeys(CONFIGS, 8), write_configs=write_configs)
    deploy_gpu(ctx)
    cmd = " ".join(steps.cmd)
    assert "bench/bench_deploy.py --configs CornerNet_Squeeze --device cuda" in cmd
    assert "--rows torch:fp32 torch:bf16 torch:compile --batch 1 8 --images 2" in cmd
    assert [row[:2] for row in steps.rows[1:]] == [
        ("  CornerNet_Squeeze torch fp32", "ok"), ("  CornerNet_Squeeze torch bf16", "ok"),
        ("  CornerNet_Squeeze torch compile", "not available")]
    assert steps.rows[1].detail == "ms/image: 21.4 batch 1, 6.2 batch 8; check passed"
    assert steps.rows[3].detail.startswith("ms/image: none; check not available: torch.compile")
    assert not steps.failed  # a runtime that cannot run here is a row, not a failure


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_rehearsal_passes_in_a_copy_without_shared_or_an_evaluator(coco128, tmp_path):
    """The whole run at CPU sizes under the budget asked, with the GPU machine's packages (no
    pytest-xdist, no COCO evaluator, the package not installed, no ../shared): bench/_rehearsal.py
    checks the log, the rows, the CUDA tests' pytest summary, the table before the deadline and
    'not scored'. Its time is printed, not asserted: how much the budget refuses depends on the
    machine's speed and load."""
    log = tmp_path / "out" / "rehearsal.log"
    # 180 s: twice what the steps take on 2 loaded cores, so that the required rows (CUDA tests,
    # train, test.py) are never refused under CI's load; refusing is tested apart, above.
    done = subprocess.run([sys.executable, "bench/gpu_check.py", "--rehearse", "--budget", "180",
                           "--log", str(log)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False,
                          env={**os.environ, _data.ENV: str(coco128)})  # the set found
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "rehearsal passed" in done.stdout and "(budget 180 s)" in done.stdout
    text = log.read_text()
    assert "budget: 180.0 s;" in text and "| CUDA tests | ok |" in text


@pytest.mark.parametrize("budget", ["nan", "inf", "-1", "0"])
def test_a_budget_that_cannot_be_right_is_refused(budget, capsys):
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--rehearse", "--budget", budget])
    assert stopped.value.code == 2
    assert "--budget must be a finite number of seconds greater than 0" in capsys.readouterr().err


def test_the_rehearsal_runs_gpu_check_with_its_budget_log_and_the_gpu_machines_packages(
        coco128, tmp_path, monkeypatch, capsys):
    """What the rehearsal starts (the run itself is the slow test's): --budget and --log as
    asked, PYTHONPATH holding only the blocking folder (no checkout, as on the GPU machine),
    pytest told not to load xdist, and each blocked package failing to import."""
    started = {}
    real_run = subprocess.run

    def run(cmd, **kwargs):
        if cmd[0] == "git":
            return real_run(cmd, **kwargs)
        started.update(cmd=cmd, env=kwargs["env"])
        probe = "import importlib, sys\nfor name in sys.argv[1:]:\n" \
            "    try:\n        importlib.import_module(name); print(name, 'imported')\n" \
            "    except ImportError:\n        print(name, 'blocked')\n"
        started["imports"] = real_run([sys.executable, "-c", probe, *_rehearsal.BLOCKED],
                                      cwd=tmp_path, env=kwargs["env"], capture_output=True,
                                      text=True, check=False).stdout
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    scratch = tmp_path / "scratch"  # kept by a failed rehearsal: here, pytest's own folder
    monkeypatch.setattr(_rehearsal.tempfile, "mkdtemp", lambda prefix: scratch.mkdir() or scratch)
    log = tmp_path / "asked.log"
    monkeypatch.setenv(_data.ENV, str(coco128))  # the set the tests found, for the copy
    assert _rehearsal.rehearse(REPO, 60.0, log) == 1  # nothing ran: the checks fail
    cmd, env = started["cmd"], started["env"]
    assert cmd[cmd.index("--budget") + 1] == "60" and cmd[cmd.index("--log") + 1] == str(log)
    assert "(budget 60 s)" in capsys.readouterr().out
    assert len(env["PYTHONPATH"].split(":")) == 1 and env["PYTHONPATH"].endswith("blocked")
    assert _data.ENV not in env and "-p no:xdist" in env["PYTEST_ADDOPTS"]
    assert started["imports"].split() == [word for name in _rehearsal.BLOCKED
                                          for word in (name, "blocked")]


def test_the_rehearsal_wants_pytests_own_summary_from_the_cuda_tests():
    rows = ["| CUDA tests | ok | 3 | {} |", "| train CornerNet_Squeeze | ok | 9 | fine |",
            "| test.py CornerNet_Squeeze | ok | 5 | not scored: no evaluator; 1 images in 2 s |"]
    refused = "\n".join(rows).format("ERROR: usage: __main__.py [options] unrecognized arguments")
    summary = "\n".join(rows).format("4 skipped in 1.20s")
    assert any("pytest's own summary" in line
               for line in _rehearsal._row_problems("", refused.splitlines()))
    assert _rehearsal._row_problems("", summary.splitlines()) == []


def test_every_step_imports_this_checkout_without_pythonpath_or_an_install(tmp_path,
                                                                           monkeypatch):
    """A step's script outside the repository's root (bench/bench_deploy.py) finds `core` in
    the checkout, even where the package is not installed (blocked here) and PYTHONPATH is
    unset, as on the GPU machine."""
    blocked = tmp_path / "blocked" / "core"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('not installed')\n")
    probe = tmp_path / "probe.py"
    probe.write_text("import core\nprint(core.__file__)\n")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    steps = Steps(tmp_path)
    output = steps.run("probe", [sys.executable, probe], timeout=60, need=0,
                       env={"PYTHONPATH": str(tmp_path / "blocked")})
    assert output is not None, steps.rows
    assert Path(output.strip()) == REPO / "core" / "__init__.py"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_gpu_prep_fills_a_folder_under_64_mib_and_prints_the_device_command(tmp_path, coco128):
    dest = tmp_path / "shared"
    done = subprocess.run(["bash", str(REPO / "bench" / "gpu_prep.sh"), str(dest)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, _data.ENV: str(coco128)})  # the set found
    assert done.returncode == 0, done.stdout + done.stderr
    copied = dest / "data" / "coco128"
    assert len(list((copied / "images").iterdir())) == len(list((coco128 / "images").iterdir()))
    for split in ("", "_train", "_val"):
        name = f"instances_coco128{split}.json"
        assert (copied / "annotations" / name).read_bytes() == \
            (coco128 / "annotations" / name).read_bytes()
    size = sum(path.stat().st_size for path in dest.rglob("*") if path.is_file())
    assert size < 64 * 2 ** 20
    assert 'carry=["shared"]' in done.stdout
    assert "bench/gpu_check.py --budget 360 --log $OUT/gpu_check.log" in done.stdout
    assert "run(timeout_s=420," in done.stdout  # 8 minutes with the machine's start
    wheels = sorted(path.name for path in (dest / "wheels").glob("*.whl"))
    if "wheels: not downloaded" in done.stdout:  # no network: the data part is what was checked
        warnings.warn("gpu_prep.sh could not download the evaluator wheels here; only the "
                      "coco128 part and the command were checked", stacklevel=1)
    else:
        assert [name.split("-")[0] for name in wheels] == ["faster_coco_eval", "pycocotools"]
        assert all("cp312" in name and "manylinux" in name for name in wheels)


def test_the_plan_fits_8_minutes_with_the_machines_start_and_leads_with_what_is_unmeasured():
    plan = in_plan(select([], [], gpus=1))
    # the CUDA tests, then a config no GPU run has trained at the GPU defaults (compiled)
    assert plan == ["cuda-tests", "train-saccade", "test-saccade"]
    assert sum(GROUPS[key].gpu for key in plan) <= PLAN_S == 8 * 60 - 120
    order = list(GROUPS)  # what the second run measured comes after what none has
    assert order.index("deterministic") < order.index("train-squeeze") < order.index("profile")


def test_the_list_marks_where_the_plan_ends(capsys):
    from bench.gpu_check import main
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith("---- the plan"))
    assert [line.split()[0] for line in lines[:cut]] == in_plan(select([], [], gpus=1))
    assert f"(--budget {PLAN_S})" in lines[cut]


class CannedStep(Steps):
    """Answers a step with bench/bench_step.py's own output instead of running it."""

    def run(self, name, cmd, timeout, need, measure=None, env=None):
        self.cmd = [str(part) for part in cmd]
        self.add(name, "ok", 1.0, measure("") if measure else "")
        return ("device cuda:0, torch 2.11.0; CornerNet_Squeeze batch 55\n"
                "row\tCornerNet_Squeeze at the defaults, compiled (default), batch 55\tok\t"
                "402.0 images/s (bf16, compiled, one forward, fused optimizer; first step 81.0 s)\n"
                "row\tcompile (default)\tFAIL\tTypeError: list indices must be integers\n"
                "log\tTraceback (most recent call last):\n"
                "log\t  File \"inductor.py\", line 1, in codegen\n"
                "log\tTypeError: list indices must be integers or slices, not NoneType\n")


def test_the_step_groups_rows_become_table_rows_and_a_traceback_goes_whole_into_the_log(
        tmp_path):
    steps = CannedStep(tmp_path, log=tmp_path / "check.log")
    ctx = Context(steps=steps, py="python", device="cuda", root=tmp_path, coco128=None,
                  backend="none", gpus=1, tiny=False, configs=tmp_path,
                  workers=dict.fromkeys(CONFIGS, 8), write_configs=write_configs)
    bench_step("compile", 110, 40, 420, "compile CornerNet_Squeeze step")(ctx)
    assert steps.cmd[1:] == ["bench/bench_step.py", "compile", "--device", "cuda"]
    assert [row[:2] for row in steps.rows[1:]] == [
        ("  CornerNet_Squeeze at the defaults, compiled (default), batch 55", "ok"),
        ("  compile (default)", "FAIL")]
    assert steps.rows[1].detail.startswith("402.0 images/s (bf16, compiled")
    log = (tmp_path / "check.log").read_text()
    assert "    Traceback (most recent call last):\n    " in log
    assert log.rstrip().endswith("    TypeError: list indices must be integers or slices, not "
                                 "NoneType")
    assert steps.failed

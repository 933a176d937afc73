"""The tools are held to the scripts' rules: one exit table, range checks, and they run from a
checkout without `pip install -e .`.

The scripts run in the test process (`inproc`) except the start from a bare checkout (a
process's own start) and the test.py refused a folder in use (two processes): those, and
in-process runs above about 2 s, are `slow`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from _tiny_coco import ROOT, inproc, make_tiny_coco, run
from _tools import load_tool

from core.config.rules import unit_interval
from core.utils import lock
from core.utils.command_table import COMMANDS

# A sitecustomize that makes `import core` fail unless the checkout itself is on sys.path, as
# on a machine where the project was never installed.
HIDE_INSTALLED = """import sys


class Hide:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name in ("core", "cornernet") and {root!r} not in sys.path:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None


sys.meta_path.insert(0, Hide())
"""

# Every script of the command table, and the bench scripts that import the checkout.
TOOLS = [*(row.script for row in COMMANDS), "bench/bench_deploy.py", "bench/bench_models.py",
         "bench/bench_shapes_generation.py"]


@pytest.mark.parametrize("text", ["nan", "-0.1", "1.5", "inf", "abc"])
def test_a_threshold_outside_zero_to_one_is_refused(text):
    with pytest.raises(ValueError, match=f"from 0 to 1, got '{text}'"):
        unit_interval(text)
    assert unit_interval("0") == 0.0 and unit_interval("1") == 1.0


@pytest.mark.parametrize("script, option", [("tools/analyze_results.py", "--score-thresh"),
                                            ("tools/analyze_results.py", "--iou-thresh"),
                                            ("test.py", "--vis-thresh"), ("demo.py", "--thresh")])
def test_the_scripts_thresholds_refuse_nan(script, option):
    done = inproc(script, "CocoTiny", option, "nan")
    assert done.returncode == 2
    assert f"argument {option}: expected a number from 0 to 1, got 'nan'" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("script", TOOLS)
def test_every_script_runs_from_a_checkout_without_the_project_installed(script, tmp_path):
    """Outside the checkout, with no PYTHONPATH and the installed `core` hidden, `--help`
    works: the script finds the project beside itself."""
    hide = tmp_path / "sitecustomize.py"  # an installed project (editable or not) is hidden
    hide.write_text(HIDE_INSTALLED.format(root=str(ROOT)))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(ROOT / script), "--help"], cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(tmp_path)}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_the_hidden_install_is_really_hidden(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(HIDE_INSTALLED.format(root=str(ROOT)))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for name in ("core", "cornernet"):
        done = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path,
                              env={**env, "PYTHONPATH": str(tmp_path)}, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr


def test_analyze_model_on_a_size_the_model_cannot_take_names_the_sizes_that_fit():
    done = inproc("tools/analyze_model.py", "CornerNet_Squeeze", "--test-size", "100", "511")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --test-size height 100 does not fit")
    assert "use 127 or 255" in lines[0]


@pytest.mark.slow  # in-process, but a whole test.py run first: 3 s of CPU
def test_analyze_results_on_a_damaged_results_file_is_one_line(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    tested = inproc("test.py", "CocoTiny", "--config-dir", root / "configs", "--testiter", 0,
                    "--images", 2, "--device", "cpu")
    assert tested.returncode == 0, tested.stderr
    results = root / "results" / "CocoTiny" / "0" / "val" / "results.json"
    results.write_text(results.read_text()[:-30])
    done = inproc("tools/analyze_results.py", "CocoTiny", "--config-dir", root / "configs",
                  "--testiter", 0)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"the results file {results} is damaged" in lines[0]


@pytest.mark.parametrize("hours, words", [
    ("0", "--hours 0.0: a job's time limit is from 1 minute"),
    ("0.001", "--hours 0.001: a job's time limit is from 1 minute"),
    ("-1", "--hours -1.0: a job's time limit is from 1 minute"),
    ("nan", "--hours nan: a job's time limit"),
    ("100000", "--hours 100000.0: a job's time limit is from 1 minute (1/60) to 8784 hours"),
])
def test_submit_refuses_a_time_limit_that_is_no_time_limit(hours, words, capsys):
    submit = load_tool("submit")
    with pytest.raises(SystemExit) as caught:
        submit.parse_args(["CornerNet_Squeeze", "--hours", hours])
    assert caught.value.code == 2 and words in capsys.readouterr().err


def test_submit_refuses_a_signal_delay_beyond_the_time_limit(capsys):
    submit = load_tool("submit")
    with pytest.raises(SystemExit):
        submit.parse_args(["CornerNet_Squeeze", "--hours", "0.05"])  # 180 s, delay 300 s
    assert "--signal-delay-s 300 must be above 0 and below the time limit (180 s)" in \
        capsys.readouterr().err


def test_submit_refuses_a_config_it_cannot_find_before_sbatch():
    done = inproc("tools/submit.py", "CornerNet_Squeze", "--hours", "1")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown config 'CornerNet_Squeze'" in lines[0]
    assert "did you mean 'CornerNet_Squeeze'?" in lines[0]


def test_submit_asks_submitit_to_requeue_until_the_run_ends_or_the_ceiling_given(tmp_path):
    pytest.importorskip("submitit")
    if shutil.which("srun") is None:  # submitit's SLURM executor looks for it when made
        pytest.skip("needs SLURM's srun on PATH (CI installs it: bash .ci/slurm-install.sh)")
    submit = load_tool("submit")
    args = submit.parse_args(["CornerNet_Squeeze", "--folder", str(tmp_path)])
    assert submit.executor(args)._executor.max_num_timeout == submit.UNLIMITED_REQUEUES
    args = submit.parse_args(["CornerNet_Squeeze", "--folder", str(tmp_path), "--max-requeues",
                              "5"])
    assert submit.executor(args)._executor.max_num_timeout == 5


def test_submit_reads_the_config_dir_the_tasks_will_read(tmp_path):
    submit = load_tool("submit")
    assert submit.config_dir(["--workers", "1", "--config-dir", str(tmp_path)]) == tmp_path
    assert submit.config_dir([f"--config-dir={tmp_path}"]) == tmp_path
    assert submit.config_dir([]) == ROOT / "configs"


@pytest.mark.slow
def test_a_second_test_py_on_a_results_folder_in_use_is_one_line(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    folder = root / "results" / "CocoTiny" / "0" / "val"
    folder.mkdir(parents=True)
    lock.acquire(folder, print)  # a live test.py (this process) writes there
    try:
        done = run("test.py", "CocoTiny", "--config-dir", root / "configs", "--testiter", 0,
                   "--images", 1, "--device", "cpu")
    finally:
        lock.release_all()
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{folder} is in use by the run of pid {os.getpid()}" in lines[0]
    assert "use another --suffix or system.result_dir" in lines[0]
    assert not (folder / "partial.jsonl").exists()
    # the refused run left nothing on disk that keeps the next one out (in this process)
    again = inproc("test.py", "CocoTiny", "--config-dir", root / "configs", "--testiter", 0,
                   "--images", 1, "--device", "cpu")
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []


def test_submit_wait_on_a_failed_job_is_one_line_with_exit_1(tmp_path, monkeypatch, capsys):
    submit = load_tool("submit")

    class FailedJob:
        job_id = "41"

        def result(self):
            raise RuntimeError("Job (task=0) failed during processing with trace:\n"
                               "----------------------\nTraceback (most recent call last):\n"
                               "  File x\nsubmitit.core.utils.FailedJobError: error: rank 0: "
                               "no images")

    monkeypatch.setattr(submit, "executor", lambda args: type(
        "Ex", (), {"submit": staticmethod(lambda training: FailedJob())})())
    assert submit.main(["CornerNet_Squeeze", "--wait", "--folder", str(tmp_path / "%j")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"error: job 41 failed: submitit.core.utils.FailedJobError: error: rank 0: "
                   f"no images; its logs: {tmp_path / '41'}")]

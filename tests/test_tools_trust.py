"""The tools are held to the scripts' rules: one exit table, range checks, and they run from a
checkout without `pip install -e .`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest
from _tiny_coco import ROOT, make_tiny_coco, run

from core.config.rules import unit_interval

# A sitecustomize that makes `import core` fail unless the checkout itself is on sys.path, as
# on a machine where the project was never installed.
HIDE_INSTALLED = """import sys


class Hide:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "core" and {root!r} not in sys.path:
            raise ModuleNotFoundError("No module named 'core'")
        return None


sys.meta_path.insert(0, Hide())
"""
TOOLS = ["tools/analyze_model.py", "tools/analyze_results.py", "tools/export.py",
         "tools/plot_metrics.py", "tools/submit.py", "train.py", "test.py", "demo.py"]


@pytest.mark.parametrize("text", ["nan", "-0.1", "1.5", "inf", "abc"])
def test_a_threshold_outside_zero_to_one_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match=f"from 0 to 1, got '{text}'"):
        unit_interval(text)
    assert unit_interval("0") == 0.0 and unit_interval("1") == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("script, option", [("tools/analyze_results.py", "--score-thresh"),
                                            ("tools/analyze_results.py", "--iou-thresh"),
                                            ("test.py", "--vis-thresh"), ("demo.py", "--thresh")])
def test_the_scripts_thresholds_refuse_nan(script, option):
    done = run(script, "CocoTiny", option, "nan")
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
    done = subprocess.run([sys.executable, "-c", "import core"], cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(tmp_path)}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr


@pytest.mark.slow
def test_analyze_model_on_a_size_the_model_cannot_take_names_the_sizes_that_fit():
    done = run("tools/analyze_model.py", "CornerNet_Squeeze", "--test-size", "100", "511")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --test-size height 100 does not fit")
    assert "use 127 or 255" in lines[0]


@pytest.mark.slow
def test_analyze_results_on_a_damaged_results_file_is_one_line(coco128, tmp_path):
    root = make_tiny_coco(coco128, tmp_path)
    tested = run("test.py", "CocoTiny", "--config-dir", root / "configs", "--testiter", 0,
                 "--images", 2, "--device", "cpu")
    assert tested.returncode == 0, tested.stderr
    results = root / "results" / "CocoTiny" / "0" / "val" / "results.json"
    results.write_text(results.read_text()[:-30])
    done = run("tools/analyze_results.py", "CocoTiny", "--config-dir", root / "configs",
               "--testiter", 0)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"the results file {results} is damaged" in lines[0]

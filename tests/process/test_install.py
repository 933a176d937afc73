"""`pip install .` (a wheel, not editable) into a fresh environment, then the `cornernet`
command from an empty folder: train, test, predict on a picture and a short video."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from _tiny_coco import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
# A tiny generated dataset and two iterations: the point is the installed command, not training.
SETTINGS = ["--set", "system.max_iter=2", "system.snapshot=2", "system.eval_iter=2",
            "system.val_iter=0", "system.display=1", "db.num_train_images=16",
            "db.num_val_images=4"]


def call(cmd, cwd, env, timeout=600):
    done = subprocess.run(list(map(str, cmd)), check=False, capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the venv's bin folder, an environment without this checkout on the path)."""
    tmp = tmp_path_factory.mktemp("install")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The machine's setuptools builds the wheel (no download); torch comes from the system
    # site-packages so that the fresh environment does not fetch it again. It builds from a
    # copy of the checkout's files: setuptools writes build/ into the tree it builds, and two
    # builds of one tree (another test run on this checkout) collide there.
    source = checkout_copy(tmp / "source")
    call([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", tmp / "dist", source], tmp, env)
    wheel = next((tmp / "dist").glob("cornernet_lite_modern-*.whl"))
    # A venv without pip of its own (seeding one costs seconds): this pip installs into it.
    call([sys.executable, "-m", "venv", "--without-pip", tmp / "venv"], tmp, env)
    bin_dir = tmp / "venv" / "bin"
    call([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q",
          "--no-deps", wheel], tmp, env)
    see_running_packages(bin_dir / "python", tmp, env)
    return bin_dir, env


def checkout_copy(dest: Path) -> Path:
    """The files git tracks (and the untracked ones it does not ignore) of this checkout, as
    they are now, copied to `dest`; the checkout itself where git cannot list them."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=ROOT, capture_output=True,
                                check=True, timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):
        return ROOT
    for name in filter(None, listed):
        if (ROOT / name).is_file() and not name.startswith("shared/"):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def running_site_dirs() -> list[str]:
    """The site-packages folders of the interpreter running the tests: a venv's own (and the
    base's when it was made with --system-site-packages), or the machine's."""
    return [path for path in sys.path
            if os.path.basename(path.rstrip(os.sep)) in ("site-packages", "dist-packages")
            and os.path.isdir(path)]


def see_running_packages(python, tmp, env):
    """Let the fresh environment import what the running interpreter has (torch, cv2, ...),
    after its own site-packages, which hold the wheel. `venv --system-site-packages` would give
    the BASE interpreter's packages: none of a venv's. A .pth file's lines are appended to
    sys.path as they are (the .pth files inside them are not run: an editable install of the
    checkout stays out of sight)."""
    done = call([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                tmp, env)
    own = done.stdout.strip()
    (Path(own) / "zz_running_interpreter.pth").write_text("\n".join(running_site_dirs()) + "\n")


def test_the_wheel_names_its_licence_and_ships_the_configs(installed, tmp_path):
    bin_dir, env = installed
    code = ("import importlib.metadata as m, cornernet, core.config as c; "
            "print(m.metadata('cornernet-lite-modern')['License-Expression']); "
            "print(cornernet.__file__); print(sorted(p.stem for p in "
            "c.CONFIG_DIR.glob('*.json')))")
    done = call([bin_dir / "python", "-c", code], tmp_path, env)
    licence, package, configs = done.stdout.splitlines()
    assert licence == "BSD-3-Clause"
    assert "site-packages" in package and str(ROOT) not in package
    assert "CornerNet_Tiny" in configs and "CornerNet_Squeeze" in configs


def test_cornernet_help_lists_the_subcommands(installed, tmp_path):
    bin_dir, env = installed
    done = call([bin_dir / "cornernet", "--help"], tmp_path, env)
    for name in ("train", "test", "predict", "export", "analyze results", "analyze model"):
        assert f"  {name} " in done.stdout, done.stdout
    wrong = subprocess.run([bin_dir / "cornernet", "trian"], check=False, capture_output=True,
                           text=True, cwd=tmp_path, env=env)
    assert wrong.returncode == 2 and "did you mean 'train'" in wrong.stderr


def test_train_test_and_predict_from_an_empty_folder(installed, tmp_path):
    bin_dir, env = installed
    work = tmp_path / "empty"
    work.mkdir()
    cornernet = bin_dir / "cornernet"
    done = call([cornernet, "train", "CornerNet_Tiny", "--workers", "1", "--device", "cpu",
                 *SETTINGS], work, env)
    snapshot = work / "cache" / "nnet" / "CornerNet_Tiny" / "CornerNet_Tiny_2.pkl"
    assert snapshot.is_file(), done.stdout
    assert "done: 2 iterations" in done.stdout
    train_log = done.stdout + done.stderr
    record = torch.load(snapshot, weights_only=True)["config"]  # --set is part of the record
    assert record["system"]["max_iter"] == 2 and record["db"]["num_val_images"] == 4
    done = call([cornernet, "test", "CornerNet_Tiny", "--testiter", "best", "--device", "cpu",
                 *SETTINGS], work, env)
    results = work / "results" / "CornerNet_Tiny" / "best" / "val"
    assert (results / "metrics.json").is_file()
    assert "images/s" in done.stdout
    # the base install draws the report pictures, and says nothing of a missing extra
    trained = work / "cache" / "nnet" / "CornerNet_Tiny"
    assert (trained / "metrics.png").is_file() and (results / "pr_curves.png").is_file()
    for said in (train_log, done.stdout + done.stderr):
        assert not [line for line in said.splitlines()
                    if "pip install" in line or "matplotlib" in line], said

    picture = next((work / "data" / "shapes" / "images" / "val").iterdir())
    clip = work / "clip.mp4"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"mp4v"), 5.0, (128, 96))
    for k in range(6):
        writer.write(np.full((96, 128, 3), 40 * k, np.uint8))
    writer.release()
    call([cornernet, "predict", "--snapshot", snapshot, "--images", picture, clip,
          "--out", work / "out", "--device", "cpu"], work, env)
    assert (work / "out" / picture.name).is_file()
    lines = (work / "out" / "detections.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 6
    capture = cv2.VideoCapture(str(work / "out" / "clip.mp4"))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 6
    capture.release()
    assert sorted(p.name for p in work.iterdir()) == ["cache", "clip.mp4", "data", "out",
                                                      "results"]
    # analyze results reads the config by name: the run's (--set included) from its snapshot
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "CornerNet_Tiny.json").write_text(json.dumps(record))
    done = call([cornernet, "analyze", "results", "CornerNet_Tiny", "--testiter", "best",
                 "--config-dir", configs], work, env)
    assert (results / "breakdown.json").is_file(), done.stdout
    assert not [line for line in (done.stdout + done.stderr).splitlines()
                if "pip install" in line or "matplotlib" in line or "generating" in line]


def test_the_layout_and_the_hints_are_the_installed_ones(installed, tmp_path):
    """No checkout: data under the working folder, the configs the package ships, and hints in
    the installed command's form."""
    bin_dir, env = installed
    code = ("from core.utils import hints, layout; print(layout.is_checkout()); "
            "print(layout.PROJECT_ROOT); "
            "print(layout.CONFIG_DIR.relative_to(layout.INSTALL_ROOT)); "
            "print(hints.install('onnx')); print(hints.command('export', 'X')); "
            "print(hints.command('analyze model'))")
    done = call([bin_dir / "python", "-c", code], tmp_path, env)
    assert done.stdout.splitlines() == ["False", str(tmp_path), "cornernet/configs",
                                        'pip install "cornernet-lite-modern[onnx]"',
                                        "cornernet export X", "cornernet analyze model"]

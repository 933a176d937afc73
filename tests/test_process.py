"""The process contract (core/engine/process.py): a command leaves its caller's process as it
found it, runs from any thread, is never run again by its own worker processes, and a few
entry points need nothing imported before them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The smallest training that writes a snapshot, as keywords of cornernet.train.
TINY = {"workers": 1, "device": "cpu", "max_iter": 2, "snapshot": 2, "eval_iter": 0,
        "val_iter": 0, "num_train_images": 16, "num_val_images": 4}


def folders(root: Path) -> dict[str, str]:
    return {"cache_dir": str(root / "cache"), "data_dir": str(root / "data"),
            "result_dir": str(root / "results")}


def run_python(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python *args` in a fresh interpreter that imports this checkout, with torch's thread
    count its own (no OMP_NUM_THREADS)."""
    environ = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    return subprocess.run([sys.executable, *args], cwd=cwd, text=True, capture_output=True,
                          timeout=300, env={**environ, "PYTHONPATH": str(ROOT)}, check=False)


def test_submit_help_works_without_submitit(tmp_path):
    done = run_python("-c", "import sys; sys.modules['submitit'] = None\n"
                      "from cornernet.cli import main\n"
                      "raise SystemExit(main(['submit', '--help']))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "usage: cornernet submit" in done.stdout and "--gpus-per-node" in done.stdout


def test_submit_without_submitit_is_one_line_naming_the_install(tmp_path):
    done = run_python("-c", "import sys; sys.modules['submitit'] = None\n"
                      "from cornernet.cli import main\n"
                      "raise SystemExit(main(['submit', 'CornerNet_Tiny']))", cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "submitit" in lines[0] and "pip install" in lines[0]


def test_load_config_needs_nothing_imported_before_it(tmp_path):
    """In a fresh interpreter: the built-in datasets' db keys are known (a COCO key is checked,
    a misspelt one refused) without importing core.dbs first."""
    code = textwrap.dedent("""\
        import sys
        from core.config import load_config
        from core.errors import ConfigError
        system, db = load_config("CornerNet_Tiny")
        print(system.snapshot_name, "image_dirs" in db)
        try:
            load_config("CornerNet_Tiny", overrides=["db.image_dir={}"])
        except ConfigError as err:
            print("refused:", err)
        print("core.dbs" in sys.modules)
        """)
    done = run_python("-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "CornerNet_Tiny True"
    assert lines[1].startswith("refused:") and "image_dirs" in lines[1]
    assert lines[2] == "False"

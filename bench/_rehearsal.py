"""`gpu_check.py --rehearse`: the GPU run's every step that needs no GPU, on this CPU.

The repository's files (tracked and untracked-but-not-ignored, as the device tool sends them) are
copied to a scratch folder with no ../shared beside it; coco128 goes into the copy's ./shared as
bench/gpu_prep.sh lays it. The GPU machine's packages are imitated: CORNERNET_DATA and
PYTHONPATH are unset; the installed package (`core`, `cornernet`), pytest-xdist and the COCO
evaluators (faster-coco-eval, pycocotools) are made unimportable, and pytest does not load
xdist's plugin (its entry points are blocked with `-p no:`), so a step that works only because
this machine has them fails here as it would there. gpu_check then runs there at CPU sizes under
`--budget` (default 100 s), writing `--log` (default a file in the scratch folder), and what it
printed and logged is checked: the machine's lines first, the data found in ./shared, the
evaluator missing and the test.py row "not scored", the CUDA tests' row ending in pytest's own
summary, every row in the log file, the groups past the budget "not run (budget)", the table and
the line that runs the rest, all before the deadline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._shared import ENV, coco128_dir, looked_in

BUDGET = 100.0
# What the rehearsal runs: the CUDA tests (all skipped on a CPU, but collected in the copy),
# training, test.py at a batch without an evaluator, the test-time shapes and the sync check at
# CPU sizes, and one group that the budget may refuse (the bench rows' parsing is
# tests/bench/test_gpu_check.py's, on bench_train's own output). The compile and profile groups are
# left out: compiling the step takes minutes of CPU (test_compiled.py checks the graph).
GROUPS = ("cuda-tests", "train-squeeze", "test-squeeze-b8", "test-shapes", "sync-check",
          "deterministic")
BLOCKED = ("faster_coco_eval", "pycocotools", "xdist", "core", "cornernet")
# pytest loads xdist by these entry points whatever the import path holds: blocked by name.
NO_XDIST = "-p no:xdist -p no:xdist.looponfail"
# The last line of a pytest run: "3 skipped in 1.20s", "2 passed, 1 skipped in 0.50s", ...
PYTEST_SUMMARY = re.compile(r"^(\d+ \w+(, \d+ \w+)*|no tests ran) in [\d.]+s( \([\d:]+\))?$")


def copy_checkout(repo: Path, dest: Path) -> None:
    """The files the device tool would send: git's tracked and untracked-not-ignored ones."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=repo, capture_output=True,
                                check=True, timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):  # not a git checkout: everything but caches
        shutil.copytree(repo, dest, ignore=shutil.ignore_patterns(
            ".git", "__pycache__", "shared", ".*_cache", "cache", "results", "data"))
        return
    for name in filter(None, listed):
        source = repo / name
        if source.is_file() and not name.startswith("shared/"):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def block_packages(folder: Path) -> None:
    """Packages that shadow the COCO evaluators, pytest-xdist and the installed project and fail
    to import, as they are missing on the GPU machine (put `folder` first on PYTHONPATH)."""
    for name in BLOCKED:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(
            f"raise ImportError('{name} is blocked by the gpu_check rehearsal')\n")


def check(output: str, log: str, copy: Path, seconds: float, budget: float = BUDGET) -> list[str]:
    """What a good rehearsal printed and logged (`log`: what this run added to the log file);
    the list of what is wrong."""
    lines = log.splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| step")]
    wrong = _header_problems(lines, log, copy) + _row_problems(output, rows)
    # Whether the budget refuses the last group depends on this machine's speed (tested apart,
    # with steps of known length, in test_gpu_check.py); what is refused must be offered.
    refused = any("| not run (budget) |" in row for row in rows)
    if any("| FAIL" in row for row in rows):
        wrong.append("a step failed")
    if refused and "the rest: python bench/gpu_check.py --only" not in log:
        wrong.append("steps were refused by the budget, but no line runs the rest")
    if seconds > budget + 10:
        wrong.append(f"it took {seconds:.0f} s against a budget of {budget:.0f} s")
    return wrong


def _header_problems(lines: list[str], log: str, copy: Path) -> list[str]:
    """The machine's lines first, coco128 found in the copy's ./shared, no evaluator."""
    wrong = []
    for start in ("nvidia-smi -L", "torch ", "df -h /dev/shm"):
        if not any(line.startswith(start) for line in lines[:6]):
            wrong.append(f"the log does not start with a '{start}' line")
    if f"coco128: {copy / 'shared' / 'data' / 'coco128'}" not in log:
        wrong.append("coco128 was not found in the copy's ./shared")
    if "COCO evaluator: none" not in log:
        wrong.append("a COCO evaluator was importable")
    return wrong


def _row_problems(output: str, rows: list[str]) -> list[str]:
    """Every printed table row is in the log; training and testing ran; test.py unscored."""
    wrong = []
    table = output.split("| step | status | seconds | detail |")[-1]
    for row in (line for line in table.splitlines() if line.startswith("| ")):
        if row not in rows:
            wrong.append(f"a table row missing from the log: {row}")
    for name in ("CUDA tests", "train CornerNet_Squeeze", "test.py CornerNet_Squeeze"):
        if not any(row.startswith(f"| {name}") and "| ok |" in row for row in rows):
            wrong.append(f"no ok row for {name}")
    for row in (row for row in rows if row.startswith("| CUDA tests |")):
        detail = row.rstrip(" |").rsplit(" | ", 1)[-1]
        if not PYTEST_SUMMARY.match(detail):
            wrong.append(f"the CUDA tests did not reach pytest's own summary: {detail}")
    if not any("test.py" in row and "not scored: no evaluator" in row for row in rows):
        wrong.append("the test.py row does not say 'not scored: no evaluator'")
    return wrong


def rehearse(repo: Path, budget: float | None = None, log: Path | None = None) -> int:
    """Run the rehearsal under `budget` seconds (default BUDGET), gpu_check's rows appended to
    `log` (default a file in the scratch folder); 0 when everything it checks holds, 1 when
    not, 2 without coco128."""
    budget = BUDGET if budget is None else budget
    coco128 = coco128_dir()
    if coco128 is None:
        print(f"error: the rehearsal copies coco128 into its checkout, and none was found here "
              f"(looked in {looked_in()})", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="gpu_check-rehearsal-"))
    copy = scratch / "checkout"
    copy_checkout(repo, copy)
    (copy / "shared" / "data").mkdir(parents=True)
    shutil.copytree(coco128, copy / "shared" / "data" / "coco128")
    block_packages(scratch / "blocked")
    log = (scratch / "out" / "gpu_check.log") if log is None else log.resolve()
    start = log.stat().st_size if log.is_file() else 0
    env = {key: value for key, value in os.environ.items()
           if key not in (ENV, "PYTHONPATH", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(scratch / "blocked"), PYTHONUNBUFFERED="1",
               PYTEST_ADDOPTS=NO_XDIST)
    cmd = [sys.executable, "bench/gpu_check.py", "--device", "cpu", "--budget", f"{budget:g}",
           "--log", str(log), "--workers", "1", "--scratch", str(scratch / "steps"),
           "--only", *GROUPS]
    print(f"rehearsal in {copy} (no ../shared beside it, no COCO evaluator, no pytest-xdist, "
          f"the package not installed): {' '.join(cmd[1:])}", flush=True)
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True,
                          timeout=budget + 60, check=False)
    seconds = time.monotonic() - t0
    print(done.stdout + done.stderr, flush=True)
    text = log.read_bytes()[start:].decode(errors="replace") if log.is_file() else ""
    wrong = check(done.stdout, text, copy, seconds, budget)
    if done.returncode != 0:
        wrong.insert(0, f"gpu_check exited {done.returncode}")
    for line in wrong:
        print(f"rehearsal: {line}")
    print(f"rehearsal {'FAILED' if wrong else 'passed'} in {seconds:.0f} s "
          f"(budget {budget:g} s); log {log}")
    if not wrong:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if wrong else 0

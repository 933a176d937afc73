"""What a hint tells the user to run, in the form that works where the code runs.

A checkout (the `core` package beside this project's pyproject.toml) has the scripts and an
editable install: `python tools/export.py ...`, `pip install -e ".[plot]"`. An installed
distribution (`pip install cornernet-lite-modern`, no checkout) has the `cornernet` command and
the package's name: `cornernet export ...`, `pip install "cornernet-lite-modern[plot]"`. Every
message that names a command, an extra or a file of the repository asks here.
"""

from __future__ import annotations

import functools
from pathlib import Path

DISTRIBUTION = "cornernet-lite-modern"
ROOT = Path(__file__).resolve().parents[2]  # the checkout's root when this is a checkout

# a checkout's script -> the installed `cornernet` subcommand that runs it
COMMANDS: dict[str, str] = {
    "train.py": "train", "test.py": "test", "demo.py": "predict",
    "tools/export.py": "export", "tools/analyze_results.py": "analyze results",
    "tools/analyze_model.py": "analyze model", "tools/check_data.py": "check",
    "tools/convert.py": "convert", "tools/benchmark.py": "benchmark",
    "tools/plot_metrics.py": "plot", "tools/submit.py": "submit",
}
# the parity tolerance, where the checkout's reference README states it
TOLERANCE_DOC = "tests/data/reference/README.md section 6"


@functools.cache
def is_checkout(root: Path = ROOT) -> bool:
    """Whether `root` is this project's checkout: a pyproject.toml that names this project
    beside the `core` package (an installed `core` lies in site-packages, with no such file)."""
    project = root / "pyproject.toml"
    if not (project.is_file() and (root / "core").is_dir()):
        return False
    try:
        text = project.read_text(encoding="utf-8")
    except OSError:
        return False
    return f'name = "{DISTRIBUTION}"' in text


def install(extra: str, checkout: bool | None = None) -> str:
    """The pip command that brings `extra` (one of pyproject's optional dependencies)."""
    if is_checkout() if checkout is None else checkout:
        return f'pip install -e ".[{extra}]"'
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def command(script: str, args: str = "", checkout: bool | None = None) -> str:
    """How to run a checkout's `script` (a key of COMMANDS) with `args`: `python <script>` in a
    checkout, `cornernet <command>` installed."""
    checkout = is_checkout() if checkout is None else checkout
    head = f"python {script}" if checkout else f"cornernet {COMMANDS[script]}"
    return f"{head} {args}".rstrip()


def tolerance_doc(checkout: bool | None = None) -> str:
    """Where the parity tolerance is written down: the checkout's file, else the rule itself."""
    if is_checkout() if checkout is None else checkout:
        return TOLERANCE_DOC
    return "the parity tolerance of the project's reference vectors"

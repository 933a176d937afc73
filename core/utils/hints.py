"""What a hint tells the user to run, in the form that works where the code runs.

A checkout (core/utils/layout.py) has the scripts and an editable install: `python
tools/export.py ...`, `pip install -e ".[plot]"`. An installed distribution (`pip install
cornernet-lite-modern`, no checkout) has the `cornernet` command and the package's name:
`cornernet export ...`, `pip install "cornernet-lite-modern[plot]"`. Every message that names a
command, an extra or a file of the repository asks here; it names a command by its words in the
one table (core/utils/command_table.py), never by a script.
"""

from __future__ import annotations

from .command_table import command as row_of
from .layout import DISTRIBUTION, is_checkout

# the parity tolerance, where the checkout's reference README states it
TOLERANCE_DOC = "tests/data/reference/README.md section 6"


def install(extra: str, checkout: bool | None = None) -> str:
    """The pip command that brings `extra` (one of pyproject's optional dependencies)."""
    if is_checkout() if checkout is None else checkout:
        return f'pip install -e ".[{extra}]"'
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def command(words: str, args: str = "", checkout: bool | None = None) -> str:
    """How to run the command `words` ("export", "analyze results") with `args`: `python
    <its script>` in a checkout, `cornernet <words>` installed."""
    row = row_of(words)
    checkout = is_checkout() if checkout is None else checkout
    head = f"python {row.script}" if checkout else f"cornernet {row.words}"
    return f"{head} {args}".rstrip()


def tolerance_doc(checkout: bool | None = None) -> str:
    """Where the parity tolerance is written down: the checkout's file, else the rule itself."""
    if is_checkout() if checkout is None else checkout:
        return TOLERANCE_DOC
    return "the parity tolerance of the project's reference vectors"

"""`cornernet`: one command for the project's commands (cornernet/commands/).

    cornernet train CornerNet_Tiny --set system.max_iter=2     (train.py)
    cornernet test CornerNet_Tiny --testiter best              (test.py)
    cornernet predict --snapshot FILE --images video.mp4       (demo.py)
    cornernet export CornerNet_Tiny --testiter best
    cornernet analyze results|model CornerNet_Tiny ...
    cornernet check CornerNet_Tiny
    cornernet convert yolo2coco data.yaml train out.json
    cornernet benchmark CornerNet_Tiny --testiter best
    cornernet submit CornerNet_Squeeze --nodes 1 ...
    cornernet plot CornerNet_Tiny

Each subcommand is the `main` of its module in cornernet.commands (its row of the one table,
core/utils/command_table.py), called in this process with the rest of the command line: the
same options, output and exit status as the script.
"""

from __future__ import annotations

import importlib
import sys

from core.utils.command_table import dispatch, help_rows
from core.utils.threads import before_torch


def version() -> str:
    """The installed package's version (its metadata), else the one the source says."""
    from importlib import metadata

    try:
        return metadata.version("cornernet-lite-modern")
    except metadata.PackageNotFoundError:
        from . import __version__

        return __version__


def usage() -> str:
    lines = ["usage: cornernet <command> [options]   (cornernet <command> --help for its options)",
             "       cornernet --version", "", "commands:"]
    lines += [f"  {words:<16} {what}" for words, what in help_rows()]
    return "\n".join(lines)


def unknown(name: str) -> str:
    from difflib import get_close_matches

    names = list(dispatch())
    near = get_close_matches(name, names, n=1)
    hint = f"did you mean '{near[0]}'? " if near else ""
    return f"error: unknown command '{name}'; {hint}valid: {', '.join(names)}"


def main(argv: list[str] | None = None) -> int:
    """Dispatch `argv` (default: the command line) to its command; returns the exit status."""
    before_torch()  # effective where torch is not imported yet (core/utils/threads.py)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"cornernet {version()}")
        return 0
    modules = dispatch()
    if argv[0] not in modules:
        print(unknown(argv[0]), file=sys.stderr)
        return 2
    if argv[0] == "train":
        from core.engine.stop import catch_early

        catch_early()  # before the heavy imports: a stop signal is remembered from here on
    module = importlib.import_module(f"{__package__}.commands.{modules[argv[0]]}")
    return module.main(argv[1:], f"cornernet {argv[0]}")


def entry() -> None:
    """The `cornernet` console script."""
    sys.exit(main())


if __name__ == "__main__":
    entry()

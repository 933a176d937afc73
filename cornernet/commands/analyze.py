"""`cornernet analyze results|model`: what limits a snapshot's AP (analyze_results.py) or what a
config's model costs (analyze_model.py)."""

from __future__ import annotations

import importlib
import sys

from core.utils.command_table import kinds

KINDS = kinds("analyze")
USAGE = (f"usage: cornernet analyze {{{','.join(KINDS)}}} ...   ("
         + ", ".join(f"cornernet analyze {kind} --help" for kind in KINDS) + ")")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """`results ...` or `model ...`: that command's exit status; 2 with the usage otherwise."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in KINDS:
        print(USAGE, file=sys.stderr if not argv or argv[0] not in ("-h", "--help")
              else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"{__package__}.{KINDS[argv[0]]}")
    return module.main(argv[1:], f"{prog or 'cornernet analyze'} {argv[0]}")


if __name__ == "__main__":
    sys.exit(main())

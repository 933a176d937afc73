#!/usr/bin/env python
"""Export a snapshot as one ONNX graph with the decoding inside, then check it.

`cornernet export` (cornernet/commands/export.py), run as a file from a checkout:
    python tools/export.py
"""

import sys
from pathlib import Path

# Python puts this file's folder (tools/) first on the path; the checkout's root takes its place,
# as `python -m` from the root would have it, so that `cornernet` and `core` are the checkout's.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from cornernet.commands.export import main  # after the line above

if __name__ == "__main__":
    sys.exit(main(prog="tools/export.py"))

#!/usr/bin/env python
"""What limits a snapshot's AP: the COCO error breakdown and a confusion matrix.

`cornernet analyze results` (cornernet/commands/analyze_results.py), run as a file from a checkout:
    python tools/analyze_results.py
"""

import sys
from pathlib import Path

# Python puts this file's folder (tools/) first on the path; the checkout's root takes its place,
# as `python -m` from the root would have it, so that `cornernet` and `core` are the checkout's.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from cornernet.commands.analyze_results import main  # after the line above

if __name__ == "__main__":
    sys.exit(main(prog="tools/analyze_results.py"))

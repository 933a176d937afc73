#!/usr/bin/env python
"""Convert detection labels between YOLO txt, Pascal VOC xml and COCO json.

`cornernet convert` (cornernet/commands/convert.py), run as a file from a checkout:
    python tools/convert.py
"""

import sys
from pathlib import Path

# Python puts this file's folder (tools/) first on the path; the checkout's root takes its place,
# as `python -m` from the root would have it, so that `cornernet` and `core` are the checkout's.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from cornernet.commands.convert import main  # after the line above

if __name__ == "__main__":
    sys.exit(main(prog="tools/convert.py"))

#!/usr/bin/env python
"""Submit a training run to SLURM from Python with submitit (pip install -e ".[submitit]").

`cornernet submit` (cornernet/commands/submit.py), run as a file from a checkout:
    python tools/submit.py
"""

import sys
from pathlib import Path

# Python puts this file's folder (tools/) first on the path; the checkout's root takes its place,
# as `python -m` from the root would have it, so that `cornernet` and `core` are the checkout's.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from cornernet.commands.submit import main  # after the line above

if __name__ == "__main__":
    sys.exit(main(prog="tools/submit.py"))

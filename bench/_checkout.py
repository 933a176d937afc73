"""The checkout's root on sys.path, for a bench script run as a file from a checkout with nothing
installed (`python bench/bench_deploy.py`): Python puts bench/ first, so `core` and `cornernet`
are found only if the root follows it. Each bench script imports this module before them."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

#!/usr/bin/env python3
"""Detect objects and draw them: python demo.py <Cfg> --testiter N --images a.jpg ... --out DIR.

The command is `cornernet predict` (cornernet/commands/predict.py); this file runs it from a
checkout, as the original project's demo.py was run.
"""

import sys

from core.utils.threads import before_torch

if __name__ == "__main__":
    before_torch()  # first: OpenMP's threads sleep while they wait (core/utils/threads.py)
    from cornernet.commands.predict import main

    sys.exit(main(prog="demo.py"))

#!/usr/bin/env python3
"""Evaluate a snapshot: python test.py <Cfg> [--testiter N] [--split S] [--suffix X] [--vis N].

The command is `cornernet test` (cornernet/commands/test.py); this file runs it from a checkout,
as the original project's test.py was run.
"""

import sys

from core.utils.threads import before_torch

if __name__ == "__main__":
    before_torch()  # first: OpenMP's threads sleep while they wait (core/utils/threads.py)
    from cornernet.commands.test import main

    sys.exit(main(prog="test.py"))

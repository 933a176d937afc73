#!/usr/bin/env python
"""Train a corner detector: python train.py <Cfg> [--iter N] [--workers W] [--initialize] ...

The command is `cornernet train` (cornernet/commands/train.py); this file runs it from a
checkout, as the original project's train.py was run.
"""

import sys

from core.engine.stop import catch_early
from core.utils.threads import before_torch

if __name__ == "__main__":
    catch_early()  # first, before the heavy imports: a stop signal is remembered from here on
    before_torch()  # and OpenMP's threads will sleep while they wait (core/utils/threads.py)
    from cornernet.commands.train import main

    sys.exit(main(prog="train.py"))

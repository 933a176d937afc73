#!/usr/bin/env python
"""Train a corner detector: python train.py <Cfg> [--iter N] [--workers W] [--initialize] ...

The command is `cornernet train` (cornernet/commands/train.py); this file runs it from a
checkout, as the original project's train.py was run.
"""

import sys

from core.engine.stop import catch_early

if __name__ == "__main__":
    catch_early()  # first, before the heavy imports: a stop signal is remembered from here on
    from cornernet.commands.train import main

    sys.exit(main(prog="train.py"))

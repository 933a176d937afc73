#!/usr/bin/env python3
"""Detect objects and draw them: python demo.py <Cfg> --testiter N --images a.jpg ... --out DIR.

The command is `cornernet predict` (cornernet/commands/predict.py); this file runs it from a
checkout, as the original project's demo.py was run.
"""

import sys

from cornernet.commands.predict import main

if __name__ == "__main__":
    sys.exit(main(prog="demo.py"))

"""How long `cornernet <command> --help` takes, and whether it imports torch.

Usage: python bench/bench_help.py [--reps 3]
Each command's help in a fresh interpreter (`python -m cornernet <command> --help`, the
interpreter's start counted: that is what a user waits for), --reps times; prints the median
seconds of each, whether torch was imported (one more run under -X importtime), and the load
average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import _checkout

WORDS = [["train"], ["test"], ["predict"], ["export"], ["analyze", "results"],
         ["analyze", "model"], ["check"], ["convert"], ["benchmark"], ["submit"], ["plot"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(_checkout.REPO)}
    print(f"{'command':<18} {'s (median)':>10}  torch")
    for words in WORDS:
        command = [sys.executable, "-m", "cornernet", *words, "--help"]
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, env=env, check=True)
            times.append(time.perf_counter() - start)
        imported = subprocess.run([sys.executable, "-X", "importtime", *command[1:]],
                                  capture_output=True, text=True, env=env, check=True).stderr
        torch = any(line.split("|")[-1].strip() == "torch" for line in imported.splitlines())
        print(f"{' '.join(words):<18} {statistics.median(times):>10.2f}  {torch}")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

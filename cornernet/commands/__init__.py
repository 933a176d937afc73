"""The commands of `cornernet`, one module each, with one contract:

- `parse_args(argv, prog)`: the command line (argparse), cheap: no torch is imported for it;
- `run(options, log) -> value`: the work, returning what it produced (metrics, files, rows),
  leaving the process as it found it (`core.engine.process.keeps_process`);
- `main(argv, prog) -> int`: the exit status through the one table (core/engine/exits.py).

train.py, test.py, demo.py and tools/*.py at the checkout's root call `main`; `cornernet` (cli.py)
dispatches by COMMANDS; the API (cornernet/api.py) calls `run`.
"""

from __future__ import annotations

# command: module of cornernet.commands
COMMANDS = {"train": "train", "test": "test", "predict": "predict", "export": "export",
            "analyze": "analyze", "check": "check", "convert": "convert",
            "benchmark": "benchmark", "submit": "submit", "plot": "plot"}
# The rows of `cornernet --help`: (the words, what it does).
HELP = [
    ("train", "train a detector (train.py)"),
    ("test", "evaluate a snapshot on a split: COCO AP (test.py)"),
    ("predict", "detect in pictures, folders, videos, cameras, streams (demo.py)"),
    ("export", "write a snapshot as ONNX, checked against torch"),
    ("analyze results", "what limits AP: errors by kind, per class"),
    ("analyze model", "parameters, FLOPs and activation memory of a model"),
    ("check", "counts, problems and what the network is shown"),
    ("convert", "YOLO or VOC to COCO json, COCO to YOLO"),
    ("benchmark", "AP, speed and size in every runtime and precision"),
    ("submit", "submit a training run to SLURM (submitit)"),
    ("plot", "a run's curves from its metrics file"),
]

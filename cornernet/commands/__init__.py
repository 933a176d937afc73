"""The commands of `cornernet`, one module each, with one contract:

- `parse_args(argv, prog)`: the command line (argparse), cheap: no torch is imported for it;
- `run(options, log) -> value`: the work, returning what it produced (metrics, files, rows),
  leaving the process as it found it (`core.engine.cli.keeps_process`);
- `main(argv, prog) -> int`: the exit status through the one table (core/engine/cli.py).

train.py, test.py, demo.py and tools/*.py at the checkout's root call `main`; `cornernet` (cli.py)
dispatches by COMMANDS; the API (cornernet/api.py) calls `run`.
"""

from __future__ import annotations

# command: (module of cornernet.commands, what it does)
COMMANDS = {
    "train": ("train", "train a detector (train.py)"),
    "test": ("test", "evaluate a snapshot on a split: COCO AP (test.py)"),
    "predict": ("predict", "detect in pictures, folders, videos, cameras, streams (demo.py)"),
    "export": ("export", "write a snapshot as ONNX, checked against torch"),
    "analyze": ("analyze", "results: what limits AP; model: what a model costs"),
    "check": ("check", "counts, problems and what the network is shown"),
    "convert": ("convert", "YOLO or VOC to COCO json, COCO to YOLO"),
    "benchmark": ("benchmark", "AP, speed and size in every runtime and precision"),
    "submit": ("submit", "submit a training run to SLURM (submitit)"),
    "plot": ("plot", "a run's curves from its metrics file"),
}

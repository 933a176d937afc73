"""`cornernet`: one command for the project's scripts.

    cornernet train CornerNet_Tiny --set system.max_iter=2     (train.py)
    cornernet test CornerNet_Tiny --testiter best              (test.py)
    cornernet predict --snapshot FILE --source video.mp4       (demo.py)
    cornernet export CornerNet_Tiny --testiter best            (tools/export.py)
    cornernet analyze results|model CornerNet_Tiny ...          (tools/analyze_*.py)
    cornernet check CornerNet_Tiny                             (tools/check_data.py)
    cornernet convert yolo2coco data.yaml train out.json       (tools/convert.py)
    cornernet benchmark CornerNet_Tiny --testiter best         (tools/benchmark.py)

Each subcommand runs the very script the checkout has, with the rest of the command line as its
arguments: the same options, the same output and the same exit status (core/engine/cli.py).
Installed (`pip install .`) the scripts are `cornernet._scripts` and `cornernet._tools`; in a
checkout they are the files at its root and in tools/.
"""

from __future__ import annotations

import importlib
import importlib.util
import runpy
import sys
from pathlib import Path
from types import ModuleType

from core.utils.threads import before_torch

# subcommand: (module in the installed package, file in a checkout, what it does)
COMMANDS = {
    "train": ("cornernet._scripts.train", "train.py", "train a detector (train.py)"),
    "test": ("cornernet._scripts.test", "test.py",
             "evaluate a snapshot on a split: COCO AP (test.py)"),
    "predict": ("cornernet._scripts.demo", "demo.py",
                "detect in pictures, folders, globs, videos, cameras, streams (demo.py)"),
    "export": ("cornernet._tools.export", "tools/export.py",
               "write a snapshot as ONNX, checked against torch (tools/export.py)"),
    "analyze results": ("cornernet._tools.analyze_results", "tools/analyze_results.py",
                        "what limits AP: errors by kind, per class (tools/analyze_results.py)"),
    "analyze model": ("cornernet._tools.analyze_model", "tools/analyze_model.py",
                      "parameters, FLOPs and speed of a model (tools/analyze_model.py)"),
    "check": ("cornernet._tools.check_data", "tools/check_data.py",
              "counts, problems and what the network is shown (tools/check_data.py)"),
    "convert": ("cornernet._tools.convert", "tools/convert.py",
                "YOLO or VOC to COCO json, COCO to YOLO (tools/convert.py)"),
    "benchmark": ("cornernet._tools.benchmark", "tools/benchmark.py",
                  "AP, speed and size in every runtime and precision (tools/benchmark.py)"),
}
CHECKOUT = Path(__file__).resolve().parents[1]


def load_script(name: str) -> ModuleType:
    """The module of subcommand `name`'s script (imported, not run)."""
    module, file, _ = COMMANDS[name]
    if importlib.util.find_spec("cornernet._scripts") is not None:
        return importlib.import_module(module)
    spec = importlib.util.spec_from_file_location(f"cornernet_{name}", CHECKOUT / file)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def usage() -> str:
    lines = ["usage: cornernet <command> [options]   (cornernet <command> --help for its options)",
             "", "commands:"]
    lines += [f"  {name:<16} {what}" for name, (_, _, what) in COMMANDS.items()]
    return "\n".join(lines)


def run(name: str, argv: list[str]) -> None:
    """Run subcommand `name`'s script as `__main__` with `argv`; it exits as the script does."""
    module, file, _ = COMMANDS[name]
    sys.argv = [f"cornernet {name}", *argv]
    if importlib.util.find_spec(module.rsplit(".", 1)[0]) is not None and \
            importlib.util.find_spec(module) is not None:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:  # a checkout on the path, not installed
        runpy.run_path(str(CHECKOUT / file), run_name="__main__")


def main(argv: list[str] | None = None) -> None:
    before_torch()  # effective where torch is not imported yet (core/utils/threads.py)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        sys.exit(0 if argv else 2)
    name = argv[0]
    if name == "analyze" and len(argv) > 1 and f"analyze {argv[1]}" in COMMANDS:
        name, argv = f"analyze {argv[1]}", argv[1:]
    if name not in COMMANDS:
        from difflib import get_close_matches
        near = get_close_matches(name, [n.split()[0] for n in COMMANDS], n=1)
        hint = f"did you mean '{near[0]}'? " if near else ""
        print(f"error: unknown command '{name}'; {hint}valid: "
              f"{', '.join(dict.fromkeys(n.split()[0] for n in COMMANDS))}"
              + ("; analyze takes 'results' or 'model'" if name == "analyze" else ""),
              file=sys.stderr)
        sys.exit(2)
    run(name, argv[1:])


if __name__ == "__main__":
    main()

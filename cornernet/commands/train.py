"""`cornernet train` (train.py): train a corner detector.

    cornernet train <Cfg> [--iter N] [--workers W] [--initialize] ...
    cornernet train <Cfg> --data PATH [--name NAME] [--no-fit] ...   (then: <NAME> by name)

Iterations start+1 .. max_iter; the learning rate is a pure function of the iteration; rank 0
writes snapshots cache/nnet/<Cfg>/<Cfg>_<iter>.pkl from which `--iter N` continues exactly. The
loop itself is core/engine/loop.py; this module is the command line around it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import CONFIG_DIR, add_set_arg
from core.engine.process import keeps_process

if TYPE_CHECKING:
    from core.config import SystemConfig
    from core.engine.launch import Options

PROG = "cornernet train"


def iteration_arg(text: str) -> str:
    """--iter: a snapshot iteration (>= 0) or 'latest'."""
    if text != "latest" and not (text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected an iteration number or 'latest', got {text!r}")
    return text


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog or PROG,
                                     description="Train CornerNet, CornerNet-Squeeze, "
                                     "CornerNet-Saccade or CornerNet-Tiny")
    parser.add_argument("cfg_file", help="config name: configs/<cfg_file>.json")
    parser.add_argument("--iter", dest="start_iter", default="0", type=iteration_arg,
                        help="continue from the snapshot of this iteration; 'latest': from the "
                             "newest snapshot that loads (from scratch when there is none)")
    parser.add_argument("--workers", default=4, type=int, help="prefetch processes per rank")
    parser.add_argument("--initialize", action="store_true",
                        help="write the iteration-0 snapshot and exit")
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--world-size", default=-1, type=int,
                        help="number of nodes of distributed training")
    parser.add_argument("--rank", default=0, type=int, help="node rank")
    parser.add_argument("--dist-url", default=None, type=str,
                        help="rendezvous, e.g. tcp://host:port (default: a local port)")
    parser.add_argument("--dist-backend", default=None, type=str,
                        help="nccl with GPUs, gloo without (the default follows the machine)")
    parser.add_argument("--procs-per-node", default=None, type=int,
                        help="training processes per node (default: one per GPU, or 1 without "
                             "GPUs)")
    parser.add_argument("--dry-run", default=None, type=int, metavar="N",
                        help="only take N batches through the data path, print its figures "
                             "(images/s, bytes per image, reading/augmenting/queueing) and exit")
    parser.add_argument("--device", default=None,
                        help="cuda, cuda:1 or cpu (default: the current GPU, else cpu); under "
                             "--distributed only cuda or cpu: rank r takes cuda:<local rank r>")
    parser.add_argument("--stop-signal", default=None, choices=("USR1", "USR2", "TERM", "HUP"),
                        help="the signal that means: snapshot, exit 75, resume me later "
                             "(default: system.stop_signal, USR1)")
    parser.add_argument("--requeue", action="store_true",
                        help="after that signal, requeue the SLURM job (system.requeue)")
    parser.add_argument("--config-dir", default=str(CONFIG_DIR), type=Path,
                        help="folder of the <cfg_file>.json files")
    parser.add_argument("--weights", default=None, metavar="FILE",
                        help="start from these weights (a snapshot of this project, a "
                             "<Cfg>_best.pkl or an official CornerNet-Lite file), also of "
                             "another class count: tensors of the same name and shape load, "
                             "the rest start fresh; a tenth of the config's learning rate and a "
                             "short warm-up unless --set gives them")
    add_data_args(parser)
    add_set_arg(parser)
    return parser.parse_args(argv)


def add_data_args(parser: argparse.ArgumentParser, name: bool = True) -> None:
    """--data, --name and --no-fit (train; check takes them too)."""
    parser.add_argument("--data", type=Path, default=None, metavar="PATH",
                        help="train on this export: a data.yaml, a COCO json, or a folder "
                             "(Roboflow, CVAT, YOLO, VOC, labelImg); the config gives the model "
                             "and the training settings, the data its classes and splits")
    if name:
        parser.add_argument("--name", default=None,
                            help="with --data: the run's name, which test, predict, export and "
                                 "--iter then take in place of a config (default: "
                                 "<config>-<data folder>)")
    parser.add_argument("--no-fit", action="store_true",
                        help="with --data: keep the config's input size, crop scales and test "
                             "scales instead of fitting them to the data's sizes")


def data_run(options: Options, log: Callable[[str], None]) -> tuple[Options, SystemConfig | None]:
    """The options of the run and, with --data, its config: resolved and written (core/data/
    from_data.py), the options naming the run (read from its folder by every rank), its --set
    applied; without --data the options as they are (and None). --name and --no-fit without
    --data are refused."""
    from core.errors import UsageError

    if options.data is None:
        if options.name is not None or options.no_fit:
            raise UsageError(f"{'--name' if options.name is not None else '--no-fit'} goes with "
                             f"--data PATH; without it the config name is the run's name")
        return options, None
    from core.data.from_data import data_config

    system_config, _, _ = data_config(options.cfg_file, options.data, options.name,
                                      list(options.overrides or []), fit=not options.no_fit,
                                      config_dir=options.config_dir, log=log, write=True,
                                      weights=options.weights)
    return dataclasses.replace(options, cfg_file=system_config.snapshot_name,
                               config_dir=system_config.snapshot_dir.parent, overrides=None,
                               data=None, name=None, no_fit=False), system_config


@keeps_process
def run(options: argparse.Namespace, log: Callable[[str], None] = print,
        outcome: dict | None = None) -> int:
    """Train as the options say (in this process, spawned ranks, torchrun or srun); returns the
    exit status (0: done, 75: stopped to be resumed, 128 + signal: stopped). The signal handlers,
    thread count and environment are the caller's again afterwards.

    `outcome` receives what a run in this process produced (core/engine/loop.py `train`); ranks
    in processes of their own fill their own copies, so it stays empty for them. With --data
    it holds the run's config as "run_config" (its record may lie outside the name's search)."""
    from core.engine.exits import USER_MISTAKES, report
    from core.engine.launch import Options, launch
    from core.engine.loop import train

    try:
        options, run_config = data_run(Options.of(options), log)
    except USER_MISTAKES as err:
        return report(err)
    if outcome is not None and run_config is not None:
        outcome["run_config"] = run_config
    return launch(options, functools.partial(train, outcome=outcome), log=log)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    return run(parse_args(argv, prog))


if __name__ == "__main__":
    from core.engine.stop import catch_early

    catch_early()  # first, before the heavy imports: a stop signal is remembered from here on
    sys.exit(main())

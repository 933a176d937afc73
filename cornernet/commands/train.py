"""`cornernet train` (train.py): train a corner detector.

    cornernet train <Cfg> [--iter N] [--workers W] [--initialize] ...
    cornernet train <Cfg> --data PATH [--name NAME] [--no-fit] ...   (then: <NAME> by name)

Iterations start+1 .. max_iter; the learning rate is a pure function of the iteration; rank 0
writes snapshots cache/nnet/<Cfg>/<Cfg>_<iter>.pkl from which `--iter N` continues exactly. The
loop itself is core/engine/loop.py; this module is the command line around it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from core.engine.options import TrainOptions
from core.engine.process import keeps_process
from cornernet.options import parse

if TYPE_CHECKING:
    from core.config import SystemConfig

PROG = "cornernet train"
DESCRIPTION = "Train CornerNet, CornerNet-Squeeze, CornerNet-Saccade or CornerNet-Tiny"


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> TrainOptions:
    """The command line as the frozen options (core/engine/options.py)."""
    return parse(TrainOptions, argv, prog or PROG, DESCRIPTION)


def data_run(options: TrainOptions, log: Callable[[str], None]
             ) -> tuple[TrainOptions, SystemConfig | None]:
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
                                      options.overrides, fit=not options.no_fit,
                                      config_dir=options.config_dir, log=log, write=True,
                                      weights=options.weights)
    return dataclasses.replace(options, cfg_file=system_config.snapshot_name,
                               config_dir=system_config.snapshot_dir.parent, overrides=(),
                               data=None, name=None, no_fit=False), system_config


@keeps_process
def run(options: TrainOptions, log: Callable[[str], None] = print) -> int:
    """Train as the options say (in this process, spawned ranks, torchrun or srun); returns the
    exit status (0: done, 75: stopped to be resumed, 128 + signal: stopped). The signal handlers,
    thread count and environment are the caller's again afterwards. What the run did is in its
    folder, written by rank 0 (core/engine/records.py reads it back)."""
    from core.engine.exits import USER_MISTAKES, report
    from core.engine.launch import launch
    from core.engine.loop import train

    try:
        options, _ = data_run(options, log)
    except USER_MISTAKES as err:
        return report(err)
    return launch(options, train, log=log)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    return run(parse_args(argv, prog))


if __name__ == "__main__":
    from core.engine.stop import catch_early

    catch_early()  # first, before the heavy imports: a stop signal is remembered from here on
    sys.exit(main())

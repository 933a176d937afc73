"""Submit a training run to SLURM from Python with submitit (pip install -e ".[submitit]").

    cornernet submit CornerNet_Squeeze --nodes 1 --gpus-per-node 4 --hours 24 \\
        --partition gpu [--slurm account=myproject] [-- more train.py options]

One task per GPU; each task is one rank of `train.py <Cfg> --distributed --iter latest` (srun
placement, as with tools/slurm/train.sbatch). Preemption and time limits use submitit's own
mechanism: SLURM sends SIGUSR2 `--signal-delay-s` before the limit; train.py, told that USR2 is
its resume signal, stops every rank at the end of the iteration and writes a snapshot; then rank 0
hands the signal back to submitit, which calls `checkpoint` (resubmit the same call, whose
`--iter latest` continues from that snapshot) and requeues the job.

A job is requeued after every time limit until training ends (submitit's own default stops after
three); `--max-requeues N` sets a ceiling, said when the job is submitted. The config must exist,
the time limit be at least a minute (and longer than --signal-delay-s), and a refusal by sbatch
or a failed job under --wait ends in one line (the project's exit table).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import CONFIG_DIR, config_path
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.utils import hints

RESUME_SIGNAL = "USR2"  # the signal submitit asks SLURM for (--signal=USR2@<delay>)
# Requeues after a time limit by default: as many as a run needs (a year of one-hour jobs).
UNLIMITED_REQUEUES = 10_000
LONGEST_HOURS = 366 * 24  # a longer time limit is a typo (--hours -1 once became 8,000 years)


def _submitit() -> Any:
    """The submitit module, or one line saying how to install it (a usage mistake: exit 2)."""
    try:
        import submitit
    except ImportError:
        raise UsageError(f"{hints.command('submit')} needs submitit: "
                         f"{hints.install('submitit')}") from None
    return submitit


class Training:
    """The callable every task runs. Checkpointable as submitit knows it (it asks for a
    `checkpoint` method): after the resume signal it resubmits this call unchanged. A plain
    class, so that this module, and `--help`, need no submitit."""

    def __init__(self, cfg: str, train_args: list[str]) -> None:
        self.cfg, self.train_args = cfg, list(train_args)

    def argv(self) -> list[str]:
        return [self.cfg, "--distributed", "--iter", "latest", "--stop-signal", RESUME_SIGNAL,
                *self.train_args]

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """What submitit's `helpers.Checkpointable.checkpoint` does: the same call again."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)

    def __call__(self) -> int:
        # absolute: submitit may carry this class to the tasks by value, without its package
        from core.engine.stop import RESUME_STATUS
        from cornernet.commands import train

        submitits = signal.getsignal(signal.SIGUSR2)  # train.py takes USR2 over while it runs
        status = train.main(self.argv())
        signal.signal(signal.SIGUSR2, submitits)
        if status == RESUME_STATUS:  # snapshot written: now submitit checkpoints and requeues
            os.kill(os.getpid(), signal.SIGUSR2)  # on rank 0 submitit's handler exits
            return status
        if status:
            raise RuntimeError(f"train.py {' '.join(self.argv())} ended with status {status}")
        return status


def executor(args: argparse.Namespace) -> Any:
    import cloudpickle

    submitit = _submitit()
    if __name__ != "__main__":  # imported: the tasks may not import this module by name
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ex = submitit.AutoExecutor(folder=args.folder, cluster="slurm",
                               slurm_max_num_timeout=args.max_requeues)
    extra = dict(item.split("=", 1) for item in args.slurm)
    ex.update_parameters(
        nodes=args.nodes, tasks_per_node=args.gpus_per_node, cpus_per_task=args.cpus_per_task,
        gpus_per_node=args.gpus_per_node, timeout_min=int(args.hours * 60),
        slurm_signal_delay_s=args.signal_delay_s, name=args.name or args.cfg,
        slurm_partition=args.partition, slurm_additional_parameters=extra)
    return ex


PROG = "cornernet submit"


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog or PROG,
                                     description=__doc__.splitlines()[0],
                                     epilog="after --: more train.py options")
    parser.add_argument("cfg", help="config name: configs/<cfg>.json")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=4,
                        help="GPUs per node, one task (rank) each")
    parser.add_argument("--cpus-per-task", type=int, default=8)
    parser.add_argument("--hours", type=float, default=24.0, help="time limit of one job")
    parser.add_argument("--signal-delay-s", type=int, default=300,
                        help="SIGUSR2 this long before the limit (README: how long a stop takes)")
    parser.add_argument("--partition", default=None)
    parser.add_argument("--name", default=None, help="job name (default: the config)")
    parser.add_argument("--folder", default=str(Path("cache", "submitit", "%j")),
                        help="submitit's logs and pickles")
    parser.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                        help="any other sbatch option, e.g. account=proj or mem=64G")
    parser.add_argument("--wait", action="store_true", help="wait for the run and its result")
    parser.add_argument("--max-requeues", type=int, default=UNLIMITED_REQUEUES,
                        help="requeues after a time limit at most (default: until training "
                             "ends; preemptions are always requeued)")
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.train_args = argv[cut + 1:]  # after --: more train.py options
    if not (args.hours * 60 >= 1 and args.hours <= LONGEST_HOURS):  # NaN fails too
        parser.error(f"--hours {args.hours}: a job's time limit is from 1 minute (1/60) to "
                     f"{LONGEST_HOURS} hours")
    if not 0 < args.signal_delay_s < args.hours * 3600:
        parser.error(f"--signal-delay-s {args.signal_delay_s} must be above 0 and below the "
                     f"time limit ({args.hours * 3600:.0f} s)")
    for name in ("nodes", "gpus_per_node", "cpus_per_task", "max_requeues"):
        if getattr(args, name) < (0 if name == "max_requeues" else 1):
            parser.error(f"--{name.replace('_', '-')} must be at least "
                         f"{0 if name == 'max_requeues' else 1}, got {getattr(args, name)}")
    return args


def config_dir(train_args: list[str]) -> Path:
    """The --config-dir the tasks' train.py will read (the repository's configs/ by default)."""
    for k, arg in enumerate(train_args):
        if arg == "--config-dir" and k + 1 < len(train_args):
            return Path(train_args[k + 1])
        if arg.startswith("--config-dir="):
            return Path(arg.split("=", 1)[1])
    return CONFIG_DIR


def first_words(err: BaseException) -> str:
    """The line of a submitit or sbatch error that says what happened."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    said = [line for line in lines if "error" in line.lower() and "Traceback" not in line]
    return (said or lines or [type(err).__name__])[-1]


@keeps_process
def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> int:
    config_path(args.cfg, config_dir(args.train_args))  # a name the tasks could not find: now
    _submitit()  # not installed: one line, not a refusal by sbatch
    said = io.StringIO()  # submitit copies sbatch's stderr here: the refusal is our one line
    try:
        with contextlib.redirect_stderr(said):
            job = executor(args).submit(Training(args.cfg, args.train_args))
    except Exception as err:  # noqa: BLE001 - sbatch's refusal arrives wrapped by submitit
        raise UsageError(f"sbatch refused the job: {first_words(err)}") from None
    finally:
        sys.stderr.write("".join(line for line in said.getvalue().splitlines(keepends=True)
                                 if "sbatch: error" not in line))
    print(f"submitted job {job.job_id}: logs in {args.folder.replace('%j', str(job.job_id))}; "
          + ("requeued after each time limit until training ends" if args.max_requeues ==
             UNLIMITED_REQUEUES else f"requeued after at most {args.max_requeues} time limits"))
    if args.wait:
        try:
            return int(job.result() or 0)
        except Exception as err:  # noqa: BLE001 - submitit's FailedJobError holds the log
            print(f"error: job {job.job_id} failed: {first_words(err)}; its logs: "
                  f"{args.folder.replace('%j', str(job.job_id))}", file=sys.stderr)
            raise SystemExit(1) from None  # a failure of the run: exit 1, one line
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), argv=argv)


if __name__ == "__main__":
    sys.exit(main())

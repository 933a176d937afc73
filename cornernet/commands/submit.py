"""Submit a training run to SLURM from Python with submitit (pip install -e ".[submitit]").

    cornernet submit CornerNet_Squeeze --nodes 1 --gpus-per-node 4 --hours 24 \\
        --partition gpu [--slurm account=myproject] [-- more train options]

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

import contextlib
import dataclasses
import io
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import CONFIG_DIR, config_path
from core.config.options import DebugOptions
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.errors import UsageError
from core.utils import hints
from core.utils.options import option

from ..options import parse

RESUME_SIGNAL = "USR2"  # the signal submitit asks SLURM for (--signal=USR2@<delay>)
# Requeues after a time limit by default: as many as a run needs (a year of one-hour jobs).
UNLIMITED_REQUEUES = 10_000
LONGEST_HOURS = 366 * 24  # a longer time limit is a typo (--hours -1 once became 8,000 years)
PROG = "cornernet submit"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubmitOptions(DebugOptions):
    """What `cornernet submit` takes; `train_args`: the train.py options after `--`."""

    cfg: str = option(help="config name: configs/<cfg>.json")
    nodes: int = option(1, "--nodes", parse=int)
    gpus_per_node: int = option(4, "--gpus-per-node", parse=int,
                                help="GPUs per node, one task (rank) each")
    cpus_per_task: int = option(8, "--cpus-per-task", parse=int)
    hours: float = option(24.0, "--hours", parse=float, help="time limit of one job")
    signal_delay_s: int = option(300, "--signal-delay-s", parse=int,
                                 help="SIGUSR2 this long before the limit (README: how long a "
                                      "stop takes)")
    partition: str | None = option(None, "--partition")
    name: str | None = option(None, "--name", help="job name (default: the config)")
    folder: str = option(str(Path("cache", "submitit", "%j")), "--folder",
                         help="submitit's logs and pickles")
    slurm: tuple[str, ...] = option((), "--slurm", repeat=True, metavar="KEY=VALUE",
                                    help="any other sbatch option, e.g. account=proj or mem=64G")
    wait: bool = option(False, "--wait", help="wait for the run and its result")
    max_requeues: int = option(UNLIMITED_REQUEUES, "--max-requeues", parse=int,
                               help="requeues after a time limit at most (default: until "
                                    "training ends; preemptions are always requeued)")
    train_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "train_args", tuple(self.train_args))
        if not (self.hours * 60 >= 1 and self.hours <= LONGEST_HOURS):  # NaN fails too
            raise UsageError(f"--hours {self.hours}: a job's time limit is from 1 minute (1/60) "
                             f"to {LONGEST_HOURS} hours")
        if not 0 < self.signal_delay_s < self.hours * 3600:
            raise UsageError(f"--signal-delay-s {self.signal_delay_s} must be above 0 and below "
                             f"the time limit ({self.hours * 3600:.0f} s)")
        for name in ("nodes", "gpus_per_node", "cpus_per_task", "max_requeues"):
            least = 0 if name == "max_requeues" else 1
            if getattr(self, name) < least:
                raise UsageError(f"--{name.replace('_', '-')} must be at least {least}, got "
                                 f"{getattr(self, name)}")


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> SubmitOptions:
    """The command line; what follows `--` is train.py's, kept as it is."""
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    options = parse(SubmitOptions, argv[:cut], prog or PROG, __doc__.splitlines()[0],
                    epilog="after --: more options of the train command")
    return dataclasses.replace(options, train_args=tuple(argv[cut + 1:]))


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


def executor(options: SubmitOptions) -> Any:
    import cloudpickle

    submitit = _submitit()
    if __name__ != "__main__":  # imported: the tasks may not import this module by name
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ex = submitit.AutoExecutor(folder=options.folder, cluster="slurm",
                               slurm_max_num_timeout=options.max_requeues)
    extra = dict(item.split("=", 1) for item in options.slurm)
    ex.update_parameters(
        nodes=options.nodes, tasks_per_node=options.gpus_per_node,
        cpus_per_task=options.cpus_per_task, gpus_per_node=options.gpus_per_node,
        timeout_min=int(options.hours * 60),
        slurm_signal_delay_s=options.signal_delay_s, name=options.name or options.cfg,
        slurm_partition=options.partition, slurm_additional_parameters=extra)
    return ex



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
def run(options: SubmitOptions, log: Callable[[str], None] = print) -> int:
    # a config the tasks could not find: refused here, not in the job's log
    config_path(options.cfg, config_dir(options.train_args))
    _submitit()  # not installed: one line, not a refusal by sbatch
    said = io.StringIO()  # submitit copies sbatch's stderr here: the refusal is our one line
    try:
        with contextlib.redirect_stderr(said):
            job = executor(options).submit(Training(options.cfg, options.train_args))
    except Exception as err:  # noqa: BLE001 - sbatch's refusal arrives wrapped by submitit
        raise UsageError(f"sbatch refused the job: {first_words(err)}") from None
    finally:
        sys.stderr.write("".join(line for line in said.getvalue().splitlines(keepends=True)
                                 if "sbatch: error" not in line))
    log(f"submitted job {job.job_id}: logs in {options.folder.replace('%j', str(job.job_id))}; "
        + ("requeued after each time limit until training ends" if options.max_requeues ==
           UNLIMITED_REQUEUES else f"requeued after at most {options.max_requeues} time limits"))
    if options.wait:
        try:
            return int(job.result() or 0)
        except Exception as err:  # noqa: BLE001 - submitit's FailedJobError holds the log
            print(f"error: job {job.job_id} failed: {first_words(err)}; its logs: "
                  f"{options.folder.replace('%j', str(job.job_id))}", file=sys.stderr)
            raise SystemExit(1) from None  # a failure of the run: exit 1, one line
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), argv=argv)


if __name__ == "__main__":
    sys.exit(main())

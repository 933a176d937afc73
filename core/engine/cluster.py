"""SLURM as a launcher: a process that `srun` started is one rank of the run.

`srun` starts every task itself, so under it train.py must neither spawn processes nor pick a
port of its own: SLURM_PROCID is the rank, SLURM_NTASKS the world size, SLURM_LOCALID the GPU on
this node, and the rendezvous is MASTER_ADDR:MASTER_PORT when the user set them, else the first
host of the job's node list and a port derived from the job id, which every task computes alike.
A batch script's shell carries SLURM_PROCID too, but no SLURM_STEP_ID: only a job step (a task
started by srun) is taken for a rank, so `python train.py --distributed` in a batch script still
spawns its own processes.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..errors import ConfigError
from ..utils import dist as dist_utils
from ..utils import hints

_NEEDED = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NNODES", "SLURM_JOB_NODELIST")
# Ports the derived rendezvous uses: above the well-known and registered services most clusters
# run, below the usual ephemeral range (32768-60999) whose ports the kernel hands out.
PORT_BASE, PORT_SPAN = 20000, 10000


@dataclass(frozen=True)
class SlurmTask:
    """This process as a task of a SLURM job step.

    rank, world: SLURM_PROCID and SLURM_NTASKS; local: SLURM_LOCALID; nodes: SLURM_NNODES;
    url: the rendezvous (tcp://host:port) every task of the step computes alike.
    """

    rank: int
    world: int
    local: int
    nodes: int
    url: str
    job_id: str


def in_job_step(env: Mapping[str, str] | None = None) -> bool:
    """True in a task that srun started (a job step), not in a batch script's shell."""
    env = os.environ if env is None else env
    return "SLURM_STEP_ID" in env and "SLURM_PROCID" in env


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list ("gpu[01-04],cpu7" -> "gpu01"), expanded by
    `scontrol show hostnames`, SLURM's own parser."""
    if not any(char in nodelist for char in "[],"):
        return nodelist  # one plain host name: nothing to expand
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                             text=True, timeout=60, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as err:
        raise ConfigError(f"cannot expand SLURM_JOB_NODELIST={nodelist!r} with `scontrol show "
                          f"hostnames` ({type(err).__name__}); set MASTER_ADDR to the first "
                          f"node's name") from err
    if not out:
        raise ConfigError(f"`scontrol show hostnames {nodelist}` named no host; set MASTER_ADDR")
    return out[0]


def derived_port(job_id: str, restart: str | None) -> int:
    """The rendezvous port of a job: a function of its id and its requeue count, so that every
    task agrees without talking, and a requeued job does not meet its predecessor's socket."""
    return PORT_BASE + (int(job_id) * 7 + int(restart or 0)) % PORT_SPAN


def slurm_task(env: Mapping[str, str] | None = None) -> SlurmTask:
    """This task's placement read from the SLURM variables (a ConfigError names a missing one)."""
    env = os.environ if env is None else env
    missing = [name for name in _NEEDED if not env.get(name)]
    if missing:
        raise ConfigError(f"started by srun but {', '.join(missing)} not set; run "
                          f"{hints.command('train')} with `srun` inside an allocation "
                          f"(sbatch/salloc)")
    try:
        rank, world, local, nodes = (int(env[name]) for name in _NEEDED[:4])
    except ValueError as err:
        raise ConfigError(f"a SLURM variable is not a number: {err}") from err
    job_id = env.get("SLURM_JOB_ID", "0")
    host = env.get("MASTER_ADDR") or first_host(env["SLURM_JOB_NODELIST"])
    port = env.get("MASTER_PORT") or derived_port(job_id, env.get("SLURM_RESTART_COUNT"))
    return SlurmTask(rank, world, local, nodes, tcp_url(host, port), job_id)


def tcp_url(host: str, port: int | str) -> str:
    """`tcp://host:port`, an IPv6 address in brackets (`MASTER_ADDR=::1` -> tcp://[::1]:port);
    a port that is not one (1-65535) is a ConfigError naming MASTER_PORT."""
    if not str(port).isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"MASTER_PORT={port!r}: expected a port number from 1 to 65535")
    host = host.strip().removeprefix("[").removesuffix("]")
    return f"tcp://[{host}]:{int(port)}" if ":" in host else f"tcp://{host}:{int(port)}"


def gpu_of(local: int, visible: int) -> int:
    """The CUDA device of local task `local` when `visible` GPUs are visible to it: its own
    index among the node's GPUs, or 0 when SLURM bound one GPU to the task (--gpus-per-task=1).
    """
    if local < visible:
        return local
    if visible == 1:
        return 0
    raise ConfigError(f"SLURM task {local} on this node sees {visible} GPUs: start one task per "
                      f"GPU (#SBATCH --ntasks-per-node=<GPUs per node> --gpus-per-node=<same>)")


def adopt(args: Any, task: SlurmTask) -> Any:
    """The options (a frozen `TrainOptions`) saying what SLURM decided: one process per task,
    this task's rank."""
    return replace(args, distributed=True, world_size=task.world, rank=task.rank,
                   dist_url=task.url)


def placement(args: Any, local_rank: int, procs: int) -> tuple[int, int, int, str]:
    """(rank, world size, device index, init url) of this process: SLURM's when srun started it
    (and torchrun did not), else what torchrun or our own launcher decided."""
    if in_job_step() and not dist_utils.launched_by_torchrun():
        task = slurm_task()
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        device = gpu_of(task.local, visible) if visible else task.local
        return task.rank, task.world, device, task.url
    return dist_utils.placement(args, local_rank, procs)

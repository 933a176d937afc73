"""Process-group helpers: how many processes, which device, and who may write."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..errors import ConfigError, closest
from . import rendezvous
from .peers import PeerWatch, store_address
from .procs import end_now


def free_port() -> int:
    """A TCP port on the loopback interface that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launched_by_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def procs_per_node(requested: int | None, gpus: bool = True) -> int:
    """`requested` processes, by default one per GPU, or 1 without GPUs (or with `gpus` False:
    CPU processes).

    One CPU process already uses every core through intra-op threads, so more processes on
    one machine only split the cores; the option exists for testing and for multi-socket hosts.
    """
    gpus = torch.cuda.device_count() if gpus and torch.cuda.is_available() else 0
    if requested is not None and requested < 1:
        raise ConfigError(f"--procs-per-node must be at least 1, got {requested}")
    if gpus and requested and requested > gpus:
        raise ConfigError(f"--procs-per-node {requested}: this machine has {gpus} GPUs; one "
                          f"process per GPU at most")
    return requested or gpus or 1


def placement(args: Any, local_rank: int, procs: int) -> tuple[int, int, int, str]:
    """(rank, world size, local rank, init url) of this process, under torchrun or ours."""
    if launched_by_torchrun():
        return (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                int(os.environ["LOCAL_RANK"]), "env://")
    return args.rank * procs + local_rank, args.world_size * procs, local_rank, args.dist_url


def watch_peers(url: str, rank: int, world: int,
                say: Callable[[str], None]) -> PeerWatch | None:
    """A PeerWatch on the run's rendezvous store; None (said once) when the url names none."""
    address = store_address(url)
    if address is None:
        if rank == 0:
            print(f"note: {url} is not tcp:// or env://: a failed rank is noticed only by the "
                  f"process group's timeout", file=sys.stderr)
        return None

    def leave(reason: str) -> None:
        print(flush=True)  # end the progress bar's line: the process ends without closing it
        say(f"error: {reason}")
        end_now(1)

    return PeerWatch(address, rank, world, leave)


def check_backend(backend: str | None, device_type: str) -> None:
    """A ConfigError (one line) unless `backend` (None: the default) is a process-group
    backend this torch build has and the device kind can use (nccl needs GPUs)."""
    if backend is None:
        return
    available = {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(),
                 "mpi": dist.is_mpi_available(), "ucc": dist.is_ucc_available()}
    if backend not in available:
        raise ConfigError(f"--dist-backend {backend!r} is not a process-group backend; "
                          f"{closest(backend, list(available))} (gloo on CPUs, nccl on GPUs)")
    if backend == "nccl" and device_type != "cuda":
        raise ConfigError("--dist-backend nccl needs GPUs and this run has none (the ranks run "
                          "on the CPU): use --dist-backend gloo, or leave it out")
    if not available[backend]:
        have = ", ".join(name for name, there in available.items() if there)
        raise ConfigError(f"--dist-backend {backend}: this torch build lacks it (it has "
                          f"{have}); use gloo on CPUs, nccl on GPUs")


def init(backend: str | None, url: str, world_size: int, rank: int,
         device: torch.device, procs: int = 1) -> None:
    """Join the process group as the process running on `device` (indexed, see
    core.utils.device.rank_device), through `rendezvous.join` for tcp:// (which says what it
    waits for); `procs` is the processes of a node."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    check_backend(backend, device.type)
    # A lost peer surfaces as an error after this long instead of a silent hang.
    if url.startswith("tcp://"):
        where = {"store": rendezvous.join(url, rank, world_size, procs)}
    elif url == "env://" and launched_by_torchrun():
        where = {"store": torchrun_store(rank)}
    else:
        where = {"init_method": url}
    dist.init_process_group(backend=backend, world_size=world_size, rank=rank,
                            timeout=rendezvous.COLLECTIVE_TIMEOUT, **where)


def torchrun_store(rank: int) -> dist.Store:
    """The store of this torchrun attempt: torchrun's own TCPStore, keys prefixed by the restart
    count.

    torchrun keeps one store for every restart of the workers, and torch's env:// join does not
    prefix the keys: after `--max-restarts` restarted the ranks, a rank could read the address
    another rank had in the attempt before, and gloo then waits for a port nobody listens on
    (seen as "connectFullMesh failed ... Connection refused").
    """
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    # The agent hosts the store unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; then rank 0 does.
    hosts = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "False") != "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          int(os.environ["WORLD_SIZE"]), is_master=hosts,
                          timeout=rendezvous.COLLECTIVE_TIMEOUT, multi_tenant=hosts)
    return dist.PrefixStore(f"cornernet/attempt/{attempt}", store)


def cleanup() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# Ranks apply the same all-reduced gradients, yet GPUs of different models may round an update
# differently: the checksums must agree to this relative tolerance, not bit for bit.
RANKS_AGREE_RTOL = 1e-6


def check_ranks_agree(model: torch.nn.Module, log: Callable[[str], None]) -> None:
    """Raise if the parameters differ between ranks (a DDP bug or a diverged rank): their sum
    and sum of squares (float64) differ by more than RANKS_AGREE_RTOL relative."""
    local = torch.zeros(2, dtype=torch.float64, device=next(model.parameters()).device)
    for param in model.parameters():
        value = param.detach().double()  # one parameter at a time: no copy of the whole model
        local[0] += value.sum()
        local[1] += (value * value).sum()
    gathered = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    if any(not torch.allclose(g, gathered[0], rtol=RANKS_AGREE_RTOL, atol=0.0)
           for g in gathered):
        raise RuntimeError("parameters differ between ranks: "
                           + ", ".join(f"rank {i}: {g.tolist()}" for i, g in enumerate(gathered)))
    log(f"parameters agree on {len(gathered)} ranks (checksum {gathered[0][0].item():.10g})")


def from_rank0(value: Any, distributed: bool) -> Any:
    """Rank 0's `value` on every rank (a decision made once, e.g. which snapshot is newest)."""
    if not distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]

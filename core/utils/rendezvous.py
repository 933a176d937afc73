"""The rendezvous of `--dist-url tcp://host:port`: every rank joins and the wait is said aloud.

torch's own rendezvous waits in silence until its timeout and then blames nobody. Here rank 0
hosts the run's TCPStore; every rank connects to it and signs in under `cornernet/join/<rank>`.
While some are missing, one process per node says every `SAY_EVERY_S` seconds which nodes it
waits for, at which address; after `CORNERNET_RENDEZVOUS_S` seconds (default 600: the nodes of a
cluster job can start minutes apart) it gives up with a `RendezvousError` naming the missing
nodes and the command line they need. The store is then handed to `init_process_group`.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta

import torch.distributed as dist

from ..errors import RunFailure
from . import env
from .peers import store_address

SAY_EVERY_S = 5.0
COLLECTIVE_TIMEOUT = timedelta(minutes=5)


class RendezvousError(RunFailure, RuntimeError):
    """The ranks of a run did not all meet; the message names who is missing and what to do."""


def give_up_after() -> float:
    return float(env.setting("CORNERNET_RENDEZVOUS_S"))


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def join(url: str, rank: int, world: int, procs: int,
         say: Callable[[str], None] = _say) -> dist.TCPStore:
    """Meet every rank of the run at `url` (tcp://host:port); returns the connected store.

    Args:
        rank, world: this process and the process count.
        procs: processes per node (rank // procs is the node; `--world-size` counts nodes).
        say: where the waiting messages go (one process per node talks).
    """
    address = store_address(url)
    if address is None:
        raise RendezvousError(f"--dist-url {url}: expected tcp://<node 0's host>:<port>")
    host, port = address
    limit = give_up_after()
    nodes, node = world // procs, rank // procs
    talks = rank % procs == 0
    started = time.monotonic()
    store = _open_store(host, port, rank, node, url, started, limit, say if talks else None)
    store.set(f"cornernet/join/{rank}", f"{socket.gethostname()}:{os.getpid()}")
    store.add("cornernet/joined", 1)
    last_said = time.monotonic()
    while store.add("cornernet/joined", 0) < world:
        now = time.monotonic()
        waited = now - started
        if waited > limit or (talks and now - last_said >= SAY_EVERY_S):
            missing = sorted({r // procs for r in range(world)
                              if not store.check([f"cornernet/join/{r}"])} - {node})
            if waited > limit:
                raise RendezvousError(
                    f"{_nodes(missing, nodes)} did not join {url} within {limit:.0f} s "
                    f"(CORNERNET_RENDEZVOUS_S): start "
                    + "; ".join(f"node {n} with --rank {n} --world-size {nodes} --dist-url {url}"
                                for n in missing)
                    + ", and check that it can reach that address")
            if talks and missing:
                say(f"node {node}: waiting for {_nodes(missing, nodes)} at {url} "
                    f"({waited:.0f} s; giving up after {limit:.0f} s)")
            last_said = now
        time.sleep(0.2)
    return store


def _nodes(missing: list[int], nodes: int) -> str:
    return ("node " if len(missing) == 1 else "nodes ") + \
        ", ".join(str(n) for n in missing) + f" of {nodes}"


def _open_store(host: str, port: int, rank: int, node: int, url: str, started: float,
                limit: float, say: Callable[[str], None] | None) -> dist.TCPStore:
    """Rank 0 listens on `port`; the others connect, retrying (and saying so) until `limit`."""
    if rank == 0:
        try:
            return dist.TCPStore(host, port, is_master=True, timeout=COLLECTIVE_TIMEOUT,
                                 wait_for_workers=False)
        except (RuntimeError, OSError) as err:
            raise RendezvousError(
                f"cannot listen at {url} on node 0 ({str(err).splitlines()[0]}): the port may "
                f"be in use or the host not this machine's; pick another --dist-url") from None
    last_said = started
    while True:
        try:  # a plain probe first: a refused TCPStore connect logs pages from C++
            socket.create_connection((host, port), timeout=SAY_EVERY_S).close()
            store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(
                seconds=SAY_EVERY_S), wait_for_workers=False)
            store.set_timeout(COLLECTIVE_TIMEOUT)
            return store
        except (RuntimeError, OSError):
            waited = time.monotonic() - started
            if waited > limit:
                raise RendezvousError(
                    f"nobody answers at {url} after {limit:.0f} s "
                    f"(CORNERNET_RENDEZVOUS_S): start node 0 (--rank 0), and check that this "
                    f"node can reach that address") from None
            if say is not None and time.monotonic() - last_said >= SAY_EVERY_S:
                say(f"node {node}: waiting for node 0 at {url} ({waited:.0f} s; giving up after "
                    f"{limit:.0f} s)")
                last_said = time.monotonic()
            time.sleep(0.5)

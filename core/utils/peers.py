"""PeerWatch: every rank of a distributed run stops within seconds when another one fails.

Without it, a rank that dies leaves the others inside a collective until the process group's
timeout (NCCL notices nothing before it). Each rank runs a thread that talks to the run's
rendezvous store (a TCPStore, the one `--dist-url tcp://...` or torchrun's MASTER_ADDR:PORT
names), through a connection of its own:

- a rank that fails posts one line under `failed` before it exits; the others see it within a
  second, say so in one line and leave at once (`os._exit`: their main thread may be blocked in
  a collective that will never return);
- every rank bumps a heartbeat counter every second and watches the next rank's counter: one
  that stops moving for `CORNERNET_HEARTBEAT_S` seconds (default 60; a killed or frozen process)
  is posted as failed. The default is long because a healthy rank can hold the interpreter for
  seconds (a COCO evaluation in C++) and a false alarm would end a run of days;
- losing the store means rank 0's node is gone (it hosts the store), unless the run is ending.

Prefetch workers watch their own trainer, so a rank that leaves this way leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from urllib.parse import urlparse

import torch.distributed as dist

from . import env

POLL_S = 0.5


def heartbeat_timeout() -> float:
    return float(env.setting("CORNERNET_HEARTBEAT_S"))


def store_address(url: str) -> tuple[str, int] | None:
    """(host, port) of the rendezvous store behind a tcp:// or env:// init method, or None."""
    if url == "env://":
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        return (host, int(port)) if host and port else None
    parsed = urlparse(url)
    if parsed.scheme == "tcp" and parsed.hostname and parsed.port:
        return parsed.hostname, parsed.port
    return None


class PeerWatch:
    """The watch thread of one rank; `report` tells the others this rank failed.

    Args:
        address: (host, port) of the run's TCPStore.
        rank, world: this process and the process count.
        leave: called with a one-line reason when another rank failed; must not return
            (the default prints the reason and ends the process at once).
    """

    def __init__(self, address: tuple[str, int], rank: int, world: int,
                 leave: Callable[[str], None] | None = None) -> None:
        self.rank, self.world = rank, world
        self._leave = leave or _leave
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self._prefix = f"cornernet/{restart}/"
        self._store = dist.TCPStore(address[0], address[1], is_master=False,
                                    timeout=timedelta(seconds=10), wait_for_workers=False)
        self._closed = threading.Event()
        self._lock = threading.Lock()  # one store operation at a time from this process
        self._thread = threading.Thread(target=self._run, daemon=True, name="peer-watch")
        self._thread.start()

    def report(self, message: str) -> None:
        """Post this rank's failure (first line of `message`) for every other rank."""
        self._post(f"rank {self.rank}: {message.splitlines()[0] if message else 'failed'}")

    def posted(self) -> str:
        """The failure another rank posted, or "" (asked when a collective broke)."""
        with contextlib.suppress(Exception), self._lock:
            if self._store.check([self._key("failed")]):
                message = self._store.get(self._key("failed")).decode()
                if not message.startswith(f"rank {self.rank}:"):
                    return message
        return ""

    def cause(self, wait_s: float = 2.0) -> str:
        """Why a collective broke, seen from here: the failure another rank posts within
        `wait_s` seconds, else the first rank whose heartbeat stood still meanwhile (it died
        without a word), else "". Asked before this rank reports, so that the first line of
        a failed run names the rank that failed first, not this one's broken connection."""
        before, deadline = self._beats(), time.monotonic() + wait_s
        while time.monotonic() < deadline:
            message = self.posted()
            if message:
                return message
            time.sleep(POLL_S)
        after = self._beats()
        silent = [r for r in range(self.world) if r != self.rank and r in before
                  and after.get(r) == before[r]]
        return (f"rank {silent[0]}: stopped answering (killed, or its node is gone)"
                if silent else "")

    def _beats(self) -> dict[int, int]:
        """Rank -> heartbeat count of every rank still in the run ({} without the store)."""
        beats = {}
        with contextlib.suppress(Exception), self._lock:
            for r in range(self.world):
                if not self._store.check([self._key(f"left/{r}")]):
                    beats[r] = self._store.add(self._key(f"hb/{r}"), 0)
        return beats

    def _post(self, line: str) -> None:
        """Set `failed` to `line` unless a failure was posted before: the first is the cause."""
        # The store may already be gone: then there is nobody left to tell.
        with contextlib.suppress(Exception), self._lock:
            self._store.compare_set(self._key("failed"), "", line)

    def close(self) -> None:
        """This rank is past its last collective: stop watching (and stop being watched)."""
        if not self._closed.is_set():
            self._closed.set()
            with contextlib.suppress(Exception), self._lock:
                self._store.set(self._key(f"left/{self.rank}"), "1")

    def _key(self, name: str) -> str:
        return self._prefix + name

    def _run(self) -> None:
        watched = (self.rank + 1) % self.world
        last_beat, last_change = -1, time.monotonic()
        limit = heartbeat_timeout()
        while not self._closed.wait(POLL_S):
            try:
                with self._lock:
                    self._store.add(self._key(f"hb/{self.rank}"), 1)
                    failed = self._store.check([self._key("failed")])
                    message = self._store.get(self._key("failed")).decode() if failed else ""
                    beat = self._store.add(self._key(f"hb/{watched}"), 0)
                    left = self._store.check([self._key(f"left/{watched}")])
            except Exception as err:  # noqa: BLE001 - the store is gone
                if self._closed.wait(2.0):  # the run was ending anyway
                    return
                self._leave(f"rank {self.rank} stopping: lost contact with the run's rendezvous "
                            f"store on rank 0's node ({type(err).__name__}); rank 0 has "
                            f"probably failed or been killed")
                return
            if message and not message.startswith(f"rank {self.rank}:"):
                if not self._closed.is_set():
                    self._leave(f"rank {self.rank} stopping because {message}")
                return
            now = time.monotonic()
            if beat != last_beat or left or self.world == 1:
                last_beat, last_change = beat, now
            elif now - last_change > limit:
                self._post(f"rank {watched}: stopped answering for {limit:.0f} s "
                           f"(killed or frozen)")


def broken_collective(err: BaseException) -> bool:
    """Whether `err` is a collective that broke because a peer went away (c10d's DistError,
    or gloo's and NCCL's plain RuntimeErrors about a closed connection or a timeout)."""
    if isinstance(err, dist.DistError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("gloo" in text or "NCCL" in text) and any(
        word in text for word in ("Connection closed", "Connection reset", "Timed out",
                                  "timed out", "remote", "Broken pipe"))


def _leave(reason: str) -> None:
    print(f"error: {reason}", file=sys.stderr, flush=True)
    os._exit(1)

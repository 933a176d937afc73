"""gpu_check's runner: commands as steps under one time budget, each row kept the moment it ends.

A device machine is lent for minutes and a command is killed at its limit, so nothing waits for
the end: every row is printed (flushed) and appended to the log file (fsync'ed) when its step
ends, as a line of a markdown table. A step whose expected time no longer fits in the budget is a
"not run (budget)" row; a step still running at the deadline is killed with its process group (a
"cut (budget)" row), so the closing table is printed before the deadline. Each step's output
(stdout and stderr together) goes to a file; the last lines of a failed or cut step are printed
and logged. Every step runs in the checkout with the checkout first on PYTHONPATH (the GPU
machine runs an uninstalled checkout with PYTHONPATH unset).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
# Seconds kept back from the budget: a killed step's grace period, then the table.
RESERVE = 15.0
KILL_GRACE = 8.0
TAIL = 25


class Row(NamedTuple):
    name: str
    status: str
    seconds: float
    detail: str


def markdown(row: Row) -> str:
    return f"| {row.name} | {row.status} | {row.seconds:.0f} | {row.detail} |"


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:80]


class Steps:
    """Runs commands under a budget; keeps one row per step, logged as it ends.

    Args:
        scratch: where each step's output file goes.
        budget: seconds from now until the table must be out (None: no limit).
        log: a file every printed line is appended to.
    """

    def __init__(self, scratch: Path, budget: float | None = None, log: Path | None = None,
                 reserve: float = RESERVE) -> None:
        self.scratch, self.log, self.reserve = scratch, log, reserve
        self.start = time.monotonic()
        self.deadline = None if budget is None else self.start + budget
        self.rows: list[Row] = []
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        """Seconds a step may still take (inf without a budget)."""
        if self.deadline is None:
            return float("inf")
        return self.deadline - time.monotonic() - self.reserve

    def say(self, text: str) -> None:
        """Print `text` now and append it to the log, on disk before this returns."""
        print(text, flush=True)
        if self.log is not None:
            with open(self.log, "a") as file:
                file.write(text + "\n")
                file.flush()
                os.fsync(file.fileno())

    def add(self, name: str, status: str, seconds: float, detail: str) -> Row:
        row = Row(name, status, seconds, detail.replace("|", "/")[:160])
        self.rows.append(row)
        self.say(markdown(row))
        return row

    def run(self, name: str, cmd: list, timeout: float, need: float,
            measure: Callable[[str], str] | None = None, env: dict | None = None) -> str | None:
        """Run `cmd` in the repository as step `name`; returns its output when it succeeded.

        `need` is the time it is expected to take: when less is left it is not started. It is
        killed after `timeout` seconds, or at the budget's end. The row's detail is
        measure(output) when it succeeded (else, or when that is empty, its last line).
        """
        left = self.left()
        if need > left:
            self.add(name, "not run (budget)", 0.0,
                     f"expects about {need:.0f} s, {max(left, 0.0):.0f} s left")
            return None
        limit = min(timeout, left)
        cmd = [str(part) for part in cmd]
        out_file = self.scratch / f"{len(self.rows):02d}-{slug(name)}.log"
        print(f"--- {name}: {' '.join(cmd)}", flush=True)
        t0 = time.monotonic()
        with open(out_file, "w") as sink:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=step_env(env),
                                    start_new_session=True)
            try:
                code: int | None = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                code = None
        seconds = time.monotonic() - t0
        output = out_file.read_text(errors="replace")
        lines = [line for line in output.splitlines() if line.strip()]
        if code == 0:
            status = "ok"
        elif code is None:
            status = "cut (budget)" if limit < timeout else f"FAIL (over {timeout:.0f} s)"
        else:
            status = f"FAIL ({code})"
        detail = (measure(output) if code == 0 and measure else "") or (lines[-1] if lines else "")
        if code != 0:
            self.say("\n".join(f"    {line}" for line in lines[-TAIL:])
                     + f"\n    (whole output: {out_file})")
        self.add(name, status, seconds, detail)
        return output if code == 0 else None

    def table(self, header: list[str]) -> str:
        lines = [*header, "", "| step | status | seconds | detail |", "|---|---|---|---|"]
        return "\n".join(lines + [markdown(row) for row in self.rows])

    @property
    def failed(self) -> bool:
        return any(row.status.startswith("FAIL") for row in self.rows)


def step_env(extra: dict | None = None) -> dict[str, str]:
    """A step's environment: this one with `extra`, and the checkout first on PYTHONPATH, so
    that a script of bench/ or tools/ imports this checkout's `core` where the package is not
    installed and PYTHONPATH is unset (as on the GPU machine)."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the step's process group (its workers too), SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # whatever of the group outlived its leader
        os.killpg(proc.pid, signal.SIGKILL)

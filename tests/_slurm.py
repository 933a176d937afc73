"""A real single-node SLURM cluster for the tests: munged, slurmctld and slurmd from Debian's
packages (`.ci/slurm-install.sh`), configured in a temporary folder and stopped afterwards.

The fixture `slurm` skips with the reason when the packages are missing or a daemon does not
start (no root, no munge key). Its `Slurm` object submits and watches jobs with the real
`sbatch`, `squeue`, `scontrol` and `scancel`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
GPUS = 2
# The settings a single node needs (see issue 19), and the ones that keep its tests from waiting:
# - SLURM holds a requeued job until cred_expire + 1 s have passed (its job_mgr.c: the new launch
#   credential must outdate the revoked one); 5 is the least it accepts (the default, 120, made
#   a requeued job wait about 160 s). A launch credential must reach slurmd within those 5 s.
# - sched_interval=1, bf_interval=1: the scheduler looks at the queue every second, so a
#   requeued job starts within a second of that time (with 5 and 2, up to 4 s later).
CONF = """\
ClusterName=cornernet-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmctldPort={port}
SlurmdPort={port1}
AuthType=auth/munge
AuthInfo=socket={munge_socket},cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobRequeue=1
ReturnToService=2
MpiDefault=none
KillWait=10
InactiveLimit=0
MinJobAge=300
FirstJobId={first_job}
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
NodeName={host} CPUs={cpus} RealMemory={memory} Gres=gpu:{gpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


class Slurm:
    """A running single-node cluster; `env` points the client commands at it."""

    def __init__(self, root: Path, env: dict[str, str], started_in: float) -> None:
        self.root, self.env, self.started_in = root, env, started_in

    def cmd(self, *args: str, timeout: float = 30, check: bool = True
            ) -> subprocess.CompletedProcess:
        return subprocess.run(args, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=check)

    def sbatch(self, *args: str, env: dict[str, str] | None = None) -> int:
        """Submit; returns the job id."""
        result = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True,
                                timeout=30, check=True, env={**self.env, **(env or {})})
        return int(result.stdout.strip().split(";")[0])

    def state(self, job: int) -> dict[str, str]:
        """`scontrol show job` as key -> value ({} once the job is forgotten)."""
        out = self.cmd("scontrol", "show", "job", str(job), "-o", check=False).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait(self, job: int, until, timeout: float) -> dict[str, str]:
        """Poll the job's state until `until(state)` holds; its last state. Five times a
        second: a poll is one `scontrol` of about 2 ms."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state(job)
            if until(state):
                return state
            time.sleep(0.2)
        raise AssertionError(f"job {job} still {self.state(job)} after {timeout} s; "
                             f"slurmctld log tail:\n{self.log_tail()}")

    def wait_done(self, job: int, timeout: float) -> dict[str, str]:
        """Wait for the job to end for good (not requeued); its last state."""
        return self.wait(job, lambda s: s.get("JobState") in
                         {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                          "OUT_OF_MEMORY", ""}, timeout)

    def log_tail(self, lines: int = 30) -> str:
        path = self.root / "slurmctld.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) \
            if path.is_file() else ""


def _pid_of(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stop(pid: int | None) -> None:
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def _free_ports() -> tuple[int, int]:
    socks = [socket.socket() for _ in range(2)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    ports = tuple(sock.getsockname()[1] for sock in socks)
    for sock in socks:
        sock.close()
    return ports


def start(root: Path) -> Slurm:
    """Start munged, slurmctld and slurmd configured under `root`; raises RuntimeError saying
    why a daemon did not start."""
    missing = [name for name in (*DAEMONS, "sbatch", "slurmstepd")
               if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not installed (run .ci/slurm-install.sh)")
    if os.geteuid() != 0:
        raise RuntimeError("the single-node SLURM of the tests needs root (slurmd runs jobs as "
                           "their user)")
    t0 = time.monotonic()
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    # munged runs as the munge user, who cannot enter pytest's private temporary folders
    munge = Path(tempfile.mkdtemp(prefix="cornernet-munge-"))
    munge.chmod(0o755)
    shutil.chown(munge, "munge", "munge")
    (root / "munge").symlink_to(munge)
    munge_socket = munge / "munge.socket.2"
    started = subprocess.run(["/usr/sbin/munged", "--socket", str(munge_socket), "--pid-file",
                              str(munge / "munged.pid"), "--log-file", str(munge / "munged.log"),
                              "--seed-file", str(munge / "munged.seed"), "--force"],
                             capture_output=True, text=True, timeout=30, user="munge",
                             check=False)
    if started.returncode:
        raise RuntimeError(f"munged did not start: {started.stderr.strip()}")
    probe = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True,
                           timeout=30).stdout
    cpus = re.search(r"CPUs=(\d+)", probe).group(1)
    memory = re.search(r"RealMemory=(\d+)", probe).group(1)
    host = socket.gethostname().split(".")[0]
    port, port1 = _free_ports()
    conf = root / "slurm.conf"
    # Counted GPUs without devices, so that the template's --gpus-per-node is granted on CPU.
    (root / "gres.conf").write_text("".join(f"NodeName={host} Name=gpu File={dev}\n"
                                             for dev in ("/dev/null", "/dev/zero")))
    # Job ids (and so the rendezvous ports train.sbatch derives from them, core/engine/cluster.py)
    # start at a number of this cluster's own: a session's first job, always job 1 before, met
    # port 20007 in use in two parallel suite runs (it never did alone).
    conf.write_text(CONF.format(host=host, cpus=cpus, memory=memory, root=root, port=port,
                                port1=port1, munge_socket=munge_socket, gpus=GPUS,
                                first_job=1 + port % 9000))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["slurmctld", "-c", "-f", str(conf)], env=env, check=True, timeout=30,
                   capture_output=True)
    subprocess.run(["slurmd", "-f", str(conf)], env=env, check=True, timeout=30,
                   capture_output=True)
    cluster = Slurm(root, env, 0.0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = cluster.cmd("sinfo", "-h", "-o", "%T", check=False).stdout.strip()
        if out in {"idle", "mixed", "allocated"}:
            cluster.started_in = time.monotonic() - t0
            return cluster
        time.sleep(0.5)
    raise RuntimeError(f"the node did not become idle in 60 s (sinfo: {out!r}); "
                       f"slurmctld log:\n{cluster.log_tail()}")


def stop(root: Path) -> None:
    """Stop the daemons started under `root` and every job step they left."""
    _stop(_pid_of(root / "slurmd.pid"))
    _stop(_pid_of(root / "slurmctld.pid"))
    _stop(_pid_of(root / "munge" / "munged.pid"))
    if (root / "munge").is_symlink():
        shutil.rmtree((root / "munge").resolve(), ignore_errors=True)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> Slurm:
    """A running single-node SLURM for the whole session (skips saying why it cannot start)."""
    root = Path(tmp_path_factory.mktemp("slurm"))
    try:
        cluster = start(root)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        stop(root)
        pytest.skip(f"no SLURM cluster: {str(err).splitlines()[0]}")
    print(f"\nSLURM cluster up in {cluster.started_in:.1f} s")
    yield cluster
    cluster.cmd("scancel", "--full", "-u", "root", check=False)
    stop(root)

#!/usr/bin/env bash
# CI: Debian's SLURM for tests/process/test_slurm.py (tests/_slurm.py starts and stops the daemons
# itself; without these packages those tests skip). About 3 MB, 11 s; needs root.
set -euo pipefail
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
    exit 0
fi
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    slurmctld slurmd slurm-client munge

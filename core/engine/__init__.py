"""The training loop's parts: schedule, steps, stop, metrics, snapshots, evaluation, and
building, checking, launching and ending a run (build, preflight, launch, exits)."""

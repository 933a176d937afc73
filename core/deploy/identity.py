"""Which snapshot an exported file holds: where tools/export.py writes a snapshot's file, and
the check that a file is the export of the snapshot asked for.

A file is the export of one snapshot (`check_identity`): its iteration must be the one asked for
(results are filed under it), its weight digest that of the snapshot's weights now (a retrained
snapshot makes its old export stale), and its weights the ones asked for (the average, or the
trained ones with --raw-weights). A file from before the identity was recorded is refused with
the command that exports it again: nothing in it says which weights it holds. Every runtime that
reads an exported file (onnxruntime, OpenVINO, one registered from outside) passes this check in
`core.deploy.runtimes.open_network`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..nnet.checkpoint import read_snapshot
from ..utils import hints
from .onnx_graph import IDENTITY_KEYS, snapshot_weights, weights_digest


def onnx_file(system_config: Any, testiter: int | str) -> Path:
    """Where tools/export.py writes the graph of snapshot `testiter`: beside the snapshot."""
    return system_config.snapshot_file(testiter).with_suffix(".onnx")


def check_identity(meta: dict[str, Any], path: Path, system_config: Any, testiter: int | str,
                   raw_weights: bool) -> None:
    """A one-line UsageError unless the exported file `path` (metadata `meta`) holds the
    weights of snapshot `testiter` that are asked for (see the module docstring). Without the
    snapshot file (only the export was copied) the iteration alone is compared."""
    export = hints.command("export", f"{system_config.snapshot_name} --testiter "
                           f"{testiter}" + (" --raw-weights" if raw_weights else ""))
    missing = [key for key in IDENTITY_KEYS if key not in meta]
    if missing:
        raise UsageError(f"{path} was exported before exports recorded their snapshot "
                         f"(no {', '.join(missing)} in its metadata), so it cannot be told "
                         f"from another snapshot's: export it again with {export}")
    if raw_weights and meta["weights"] != "raw":
        raise UsageError(f"{path} holds the average of the weights, but --raw-weights asks for "
                         f"the trained ones: export them with {export}")
    snapshot_path = system_config.snapshot_file(testiter)
    snapshot = read_snapshot(snapshot_path) if snapshot_path.is_file() else None
    # Results are filed under an asked number; `best` is the iteration its snapshot records.
    iteration = testiter if isinstance(testiter, int) or snapshot is None else \
        snapshot.get("iteration", testiter)
    if isinstance(iteration, int) and meta["iteration"] != iteration:
        raise UsageError(f"{path} was exported from iteration {meta['iteration']}, not "
                         f"iteration {iteration} (--testiter {testiter}): export iteration "
                         f"{iteration} with {export}, or evaluate --testiter "
                         f"{meta['iteration']}")
    if snapshot is not None:
        weights = snapshot_weights(snapshot, meta["weights"])
        if not weights or weights_digest(weights) != meta["digest"]:
            raise UsageError(f"{path} is stale: it was exported from iteration "
                             f"{meta['iteration']}'s earlier weights, and {snapshot_path.name} "
                             f"(iteration {iteration}) now holds other ones (trained again "
                             f"since): export it again with {export}")

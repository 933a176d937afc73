"""The benchmark: every runtime and precision of one snapshot compared in one table (AP, AP50,
ms per image, size, check), as `compare_runtimes` returns it (`BenchmarkReport`).

The .onnx file is exported (core/deploy/exporter.py, which checks it against torch) when it is
missing or stale (`holds_snapshot`), the INT8 files are made from it (core/deploy/quantize.py,
calibrated on training images) when missing (`prepare_files`). Every row is then measured and
judged (core/deploy/measure.py): ms per image of the first validation image as test.py feeds
it, repeated `batch` times, on a CPU at each thread count, on a GPU at each batch; AP and AP50
on the first `images` validation images. The progress (what it runs on, each row as it is
measured, so that a run cut short keeps what it measured) goes to `log`; the table is the
report's (`BenchmarkReport.table`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2

from ..config import ConfigError, lookup
from ..dbs import datasets
from ..errors import UserMistake
from ..inference.cornernet import decode_kwargs, network_input, resize_and_pad
from ..nnet.checkpoint import default_snapshot, snapshot_label
from ..utils.device import resolve_device
from ..utils.threads import set_torch_threads
from .defaults import DEFAULT_IMAGES
from .identity import check_identity, onnx_file
from .machine import cpu_line, device_line
from .measure import REFERENCE, empty_row, first_line, judge, measure_row, timings
from .onnx_graph import META_KEYS
from .runtimes import default_rows, open_network, runtime, unavailable


@dataclasses.dataclass(frozen=True)
class BenchmarkReport:
    """The benchmark's rows and what they ran on.

    Attributes:
        rows: one dict per row (core/deploy/measure.py), in the order asked.
        columns: the keys of each row's `ms` ("1", "2", "1/b8" on a CPU; "b1", "b8" on a GPU);
            empty when the device is missing.
        cpu: the CPU's model and instruction sets (`machine.cpu_line`).
        device: where the rows ran (`machine.device_line`), or why they could not.
    """

    rows: tuple[dict[str, Any], ...]
    columns: tuple[str, ...]
    cpu: str
    device: str

    def table(self) -> str:
        """The rows as a markdown table."""
        names = {key: f"ms @{key} thr" if key.isdigit() else
                 f"ms/img @{key.replace('/', ' thr ').replace('b', 'batch ')}"
                 for key in self.columns}
        head = ["runtime", "precision", "AP", "AP50", *names.values(), "size MB", "check"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in self.rows:
            cells = [row["runtime"], row["precision"], number(row["AP"], 3),
                     number(row["AP50"], 3),
                     *[number(row["ms"].get(key), 1) for key in self.columns],
                     number(row["size_mb"], 1), row["check"]]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def compare_runtimes(system_config: Any, db_config: dict, testiter: int | str | Path | None,
                     *, rows: list[str] | None = None, device: str | None = None,
                     threads: list[int], batch: list[int] | None = None,
                     images: int | None = None, reps: int = 3, time_size: int | None = None,
                     calib_images: int = DEFAULT_IMAGES, calib_split: str | None = None,
                     keep_float: str = "heads", log: Callable[[str], None] = print,
                     trace: Callable[[str], None] | None = None) -> BenchmarkReport:
    """Measure `rows` (default: the device's, `runtimes.default_rows`) of snapshot `testiter`
    (default: the config's final one) on `device` (default: the GPU where there is one) at
    each of `threads` and `batch` (default: 1 and 8 on a GPU, 1 on a CPU), AP on the first
    `images` validation images (default all), each time the median of `reps` runs of the first
    validation image (resized to `time_size` squared when given). A failing row's traceback
    goes to `trace`."""
    cpu = cpu_line()
    log(cpu)
    try:
        where = resolve_device(device)
    except ConfigError as err:  # --device cuda without a GPU: every row says so
        why = f"not available: {first_line(err)}"
        return BenchmarkReport(tuple(empty_row(row, why) for row in rows or default_rows("cuda")),
                               (), cpu, why)
    batch = batch or ([1, 8] if where.type == "cuda" else [1])
    said = device_line(where, threads, batch)
    log(said)
    testiter = snapshot_label(system_config, default_snapshot(system_config, log)
                              if testiter is None else testiter)
    db = lookup(datasets, system_config.dataset, "dataset")(db_config,
                                                            split=system_config.val_split,
                                                            sys_config=system_config)
    rows = list(rows or default_rows(where.type))
    files = prepare_files(system_config, db_config, testiter, rows, calib_images=calib_images,
                          calib_split=calib_split, keep_float=keep_float, log=log)
    image = db.read_image(db.db_inds[0])
    canvas = (resize_and_pad(image, db.configs["test_scales"][0])[0] if time_size is None
              else cv2.resize(image, (time_size, time_size)))
    log(f"timed input: Bx3x{canvas.shape[0]}x{canvas.shape[1]}")
    # In channels-last memory, as test.py feeds it: CPU convolutions take another path for
    # each layout (bf16 in autocast: oneDNN's for channels-last, ten times slower otherwise).
    one = network_input(canvas[None], db.mean, db.std, "cpu")
    set_torch_threads(threads[0])
    nnet, _ = open_network(REFERENCE[0], system_config, db, testiter, str(where),
                           precision=REFERENCE[1])  # float32, whatever system.amp says
    reference = [nnet.test(one, **decode_kwargs(db.configs))[0].cpu().numpy()]
    del nnet
    results = []
    for row in rows:
        log(f"measuring {row} ...")
        done = measure_row(row, system_config, db, testiter, files, one, reference,
                           device=where, threads=threads, batches=batch, reps=reps,
                           images=images, trace=trace)
        results.append(done)
        log(f"  {row}: ms/image {done['ms'] or '-'}, AP {number(done['AP'], 3)}"
            + (f", {done['check']}" if done["check"] else ""))
    judge(results)
    return BenchmarkReport(tuple(results), tuple(key for key, _, _ in
                                                 timings(where, threads, batch)), cpu, said)


def below_min_ap(rows: list[dict[str, Any]], min_ap: float, named: bool) -> list[str]:
    """The rows ("runtime precision") whose AP is below `min_ap`, or was not measured where
    the rows were `named` (asked for by name: a row that is not available then counts)."""
    return [f"{row['runtime']} {row['precision']}" for row in rows
            if (row["AP"] is not None and row["AP"] < min_ap) or (row["AP"] is None and named)]


def holds_snapshot(onnx: Path, system_config: Any, testiter: Any) -> bool:
    """Whether `onnx` is an export of snapshot `testiter`'s current weights (its recorded
    identity, as the runtimes check it): a file missing, unreadable, from before the identity,
    of another iteration or of weights trained since is exported again, not failed on."""
    if not onnx.is_file():
        return False
    try:
        import onnx as onnx_package
        model = onnx_package.load(str(onnx), load_external_data=False)
        meta = {prop.key: json.loads(prop.value) for prop in model.metadata_props
                if prop.key in META_KEYS}
        check_identity(meta, onnx, system_config, testiter, raw_weights=False)
    except ImportError:  # without the onnx extra the rows say so themselves
        return True
    except Exception:  # noqa: BLE001 - stale, foreign or unreadable: the export says what is wrong
        return False
    return True


def prepare_files(system_config: Any, db_config: dict, testiter: int | str, rows: list[str], *,
                  calib_images: int = DEFAULT_IMAGES, calib_split: str | None = None,
                  keep_float: str = "heads",
                  log: Callable[[str], None] = print) -> dict[str, Path | str]:
    """{row: file} of every exported row, or {row: why not} ("not available: ..." or
    "failed: ...") where its file could not be made. The .onnx is exported (its report to
    `log`) when it does not hold the snapshot's weights now."""
    from .exporter import ExportCheckFailed, export_snapshot

    files: dict[str, Path | str] = {}
    onnx = onnx_file(system_config, testiter)
    exported = [row for row in rows if runtime(row.split(":")[0]).exported]
    if not holds_snapshot(onnx, system_config, testiter) and exported:
        log(f"exporting {onnx} (cornernet export) ...")
        try:
            for line in export_snapshot(system_config, db_config, testiter).lines():
                log(line)
        except Exception as err:  # noqa: BLE001 - a failed export is a row's "failed: ..."
            if isinstance(err, ExportCheckFailed):
                for line in err.report.lines():
                    log(line)
            why = first_line(err) if isinstance(err, (UserMistake, FileNotFoundError)) else \
                f"{type(err).__name__}: {first_line(err)}"
            return {row: f"failed: export: {why}" for row in exported}
    for row in exported:
        name, precision = row.split(":")
        files[row] = (make_int8(system_config, db_config, onnx, name, calib_images, calib_split,
                                keep_float, log) if precision == "int8" else onnx)
    return files


def make_int8(system_config: Any, db_config: dict, onnx: Path, name: str, count: int,
              split: str | None, keep_float: str,
              log: Callable[[str], None] = print) -> Path | str:
    """The INT8 file of runtime `name` beside `onnx`, quantized now (on `count` images of
    `split`, default the training split) unless it is newer than `onnx`; why not ("not
    available: ..." or "failed: ...") when it cannot be made."""
    from .quantize import calibration_inputs, int8_file

    try:
        out = int8_file(onnx, name)
        if out.is_file() and out.stat().st_mtime >= onnx.stat().st_mtime:
            return out
        split = split or system_config.train_split
        db = lookup(datasets, system_config.dataset, "dataset")(db_config, split=split,
                                                                sys_config=system_config)
        scale = db.configs["test_scales"][0]
        inputs = calibration_inputs(db, scale, count, log=log)
        start = time.perf_counter()
        record = runtime(name).int8.quantize(onnx, out, inputs, split, scale, keep_float)
        log(f"quantized {out} in {time.perf_counter() - start:.0f} s: {record['images']} "
            f"images of split {split}, float: {len(record['float_layers'])} head convs")
        return out
    except unavailable() as err:
        return f"not available: {first_line(err)}"
    except Exception as err:  # noqa: BLE001 - one row fails, the others go on
        return f"failed: quantization: {first_line(err)}"


def number(value: float | None, digits: int) -> str:
    """A table cell: `value` to `digits` decimals, "-" for None."""
    return "-" if value is None else f"{value:.{digits}f}"

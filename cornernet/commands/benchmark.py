"""Every runtime and precision of one snapshot in one table: AP, AP50, ms per image, size, check.

    cornernet benchmark <Cfg> [--testiter N|best] [--images N] [--threads 1 2]
                              [--device cpu|cuda] [--batch 1 8] [--rows RUNTIME:PRECISION ...]
                              [--calib-images N] [--calib-split SPLIT] [--keep-float heads|none]
                              [--reps 3] [--json PATH] [--min-ap AP]

Rows on a CPU: torch fp32 and bf16 (autocast), onnxruntime fp32 and int8, OpenVINO f32, default
(the CPU plugin's choice: bf16 where the CPU has bf16 units) and int8; on a GPU (--device, the
default where there is one): torch fp32, bf16 and compile (torch.compile, float32), which a CPU
runs too when named in --rows. Each runtime of the registry (core/deploy/runtimes.py) declares
its rows, its default rows per device and which of its precisions are exact, so a runtime
registered from outside has rows too. The .onnx file is exported (`cornernet export`, which
checks it against torch) when missing or stale, the INT8 files are made from it (core/deploy/
quantize.py, calibrated on --calib-images training images) when missing. Every row then:

- check: its detections on the first validation image against torch fp32's: "passed" when an
  exact precision (fp32, f32, compile) is within the parity tolerance (shared/reference/
  README.md section 6) or a reduced one (bf16, default, int8) has AP within 0.01 of torch
  fp32's; "failed: why" otherwise; "not available: why" when its package, file, compiler or GPU
  is missing. A failing row is a row: the others still run.
- AP, AP50: the COCO metrics on the first --images validation images (default all), as test.py;
- ms: median ms per image over --reps runs (after a warm-up) of the first validation image as
  test.py feeds it, repeated --batch times: on a CPU at each --threads count (default 1 and all
  cores; columns "1", "2", and "1/b8" for batch 8), on a GPU at each batch (columns "b1", "b8",
  the GPU synchronised before and after each run);
- size_mb: the file the runtime reads (the evaluated weights for torch).

The CPU model and its instruction sets come first, then the device. --json writes the rows;
--min-ap makes the exit status 1 when a row's AP is below it (a row that is not available
counts only when named in --rows).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.config import CONFIG_DIR, DEFAULT_SNAPSHOT, ConfigError, load_config, lookup, snapshot_arg
from core.deploy.defaults import DEFAULT_IMAGES, KEEP_FLOAT
from core.deploy.runtimes import DEFAULT, RUNTIMES, open_network, runtime
from core.engine.exits import describe, exit_status
from core.engine.process import keeps_process
from core.inference.coco_eval import score
from core.utils.threads import set_torch_threads, usable_cpus

# torch, cv2, the datasets and the deploy modules are imported by the functions that use them,
# so that --help imports none of them (cornernet/commands/__init__.py).
if TYPE_CHECKING:
    import torch

# The reference row: the default runtime in float32 (every other row is checked against it).
REFERENCE = (DEFAULT, "fp32")
AP_LOSS = 0.01  # a reduced precision passes within this AP of torch fp32
PROG = "cornernet benchmark"


def all_rows() -> list[str]:
    """Every row a registered runtime can measure."""
    return [f"{entry.name}:{precision}" for entry in RUNTIMES.values()
            for precision in entry.row_names()]


def default_rows(device_type: str) -> list[str]:
    """The rows measured by default on a device of this type, as each runtime declares them."""
    return [f"{entry.name}:{precision}" for entry in RUNTIMES.values()
            for precision in entry.rows.get(device_type, ())]


def unavailable() -> tuple[type[BaseException], ...]:
    """What a runtime raises when its package, compiler or GPU is missing."""
    return (ImportError, *(kind for entry in RUNTIMES.values() for kind in entry.unavailable))


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog or PROG, description=__doc__.splitlines()[0])
    parser.add_argument("cfg_file", help="config name in configs/, e.g. CornerNet_Squeeze")
    parser.add_argument("--testiter", type=snapshot_arg, default=None,
                        help=f"snapshot iteration or 'best' ({DEFAULT_SNAPSHOT})")
    parser.add_argument("--images", type=int, default=None,
                        help="evaluate the first N validation images (default: all)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, usable_cpus()],
                        help="thread counts to time (default: 1 and the CPUs this process "
                             "may use)")
    parser.add_argument("--rows", nargs="+", choices=all_rows(), default=None,
                        metavar="ROW", help=f"the rows to measure, of {' '.join(all_rows())} "
                        f"(default on a CPU: {' '.join(default_rows('cpu'))}; on a GPU: "
                        f"{' '.join(default_rows('cuda'))}); torch:compile is torch.compile "
                        "(inductor) of the model, float32")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda or cuda:N (default: the GPU where there is one)")
    parser.add_argument("--batch", type=int, nargs="+", default=None,
                        help="time ms per image at these batch sizes (default: 1 and 8 on a "
                             "GPU, 1 on a CPU)")
    parser.add_argument("--calib-images", type=int, default=DEFAULT_IMAGES,
                        help="training images the INT8 files are calibrated on (default "
                             f"{DEFAULT_IMAGES})")
    parser.add_argument("--calib-split", default=None,
                        help="the split to calibrate on (default: system.train_split)")
    parser.add_argument("--keep-float", choices=KEEP_FLOAT, default="heads",
                        help="INT8: keep the heads' last convolutions in float (default)")
    parser.add_argument("--reps", type=int, default=3, help="timed runs per row (median)")
    parser.add_argument("--time-size", type=int, default=None, metavar="N",
                        help="time on the first validation image resized to N x N (default: "
                             "as test.py feeds it at the first test scale)")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--min-ap", type=float, default=None,
                        help="exit 1 when a row's AP is below this")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks of errors, also of each failing row's")
    args = parser.parse_args(argv)
    for name in ("images", "calib_images", "reps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.threads) < 1:
        parser.error("--threads must be at least 1")
    if args.batch is not None and min(args.batch) < 1:
        parser.error("--batch must be at least 1")
    return args


def holds_snapshot(onnx: Path, system_config: Any, testiter: Any) -> bool:
    """Whether `onnx` is an export of snapshot `testiter`'s current weights (its recorded
    identity, as the runtimes check it): a file missing, unreadable, from before the identity,
    of another iteration or of weights trained since is exported again, not failed on."""
    from core.deploy.identity import check_identity
    from core.deploy.onnx_graph import META_KEYS

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


def prepare_files(args: argparse.Namespace, system_config: Any, testiter: Any,
                  rows: list[str]) -> dict[str, Path | str]:
    """{row: file} of every exported row, or {row: why not} ("not available: ..." or
    "failed: ...") where its file could not be made."""
    from core.deploy.identity import onnx_file

    files: dict[str, Path | str] = {}
    onnx = onnx_file(system_config, testiter)
    exported = [row for row in rows if runtime(row.split(":")[0]).exported]
    if not holds_snapshot(onnx, system_config, testiter) and exported:
        print(f"exporting {onnx} (cornernet export) ...", flush=True)
        from . import export  # in this process: the same command, no script path needed

        try:
            export.run(export.parse_args([args.cfg_file, "--testiter", str(testiter),
                                          "--config-dir", str(args.config_dir)]))
        except Exception as err:  # noqa: BLE001 - a failed export is a row's "failed: ..."
            why = describe(err)[1].strip().splitlines()[0] or type(err).__name__
            return {row: f"failed: export: {why}" for row in exported}
    for row in exported:
        name, precision = row.split(":")
        files[row] = make_int8(args, system_config, onnx, name) if precision == "int8" else onnx
    return files


def make_int8(args: argparse.Namespace, system_config: Any, onnx: Path,
              name: str) -> Path | str:
    """The INT8 file of runtime `name` beside `onnx`, quantized now unless it is newer than
    `onnx`; why not ("not available: ..." or "failed: ...") when it cannot be made."""
    from core.dbs import datasets
    from core.deploy.quantize import calibration_inputs, int8_file

    try:
        out = int8_file(onnx, name)
        if out.is_file() and out.stat().st_mtime >= onnx.stat().st_mtime:
            return out
        split = args.calib_split or system_config.train_split
        db_config = load_config(args.cfg_file, args.config_dir)[1]
        db = lookup(datasets, system_config.dataset, "dataset")(db_config, split=split,
                                                                sys_config=system_config)
        scale = db.configs["test_scales"][0]
        inputs = calibration_inputs(db, scale, args.calib_images, log=print)
        start = time.perf_counter()
        record = runtime(name).int8.quantize(onnx, out, inputs, split, scale, args.keep_float)
        print(f"quantized {out} in {time.perf_counter() - start:.0f} s: {record['images']} "
              f"images of split {split}, float: {len(record['float_layers'])} head convs")
        return out
    except unavailable() as err:
        return f"not available: {_first_line(err)}"
    except Exception as err:  # noqa: BLE001 - one row fails, the others go on
        return f"failed: quantization: {_first_line(err)}"


def open_row(row: str, system_config: Any, db: Any, testiter: Any,
             files: dict[str, Path | str], device: torch.device) -> tuple[Any, float]:
    """The network of `row` on `device` and its size in MiB."""
    name, precision = row.split(":")
    entry = runtime(name)
    file = Path(files[row]) if entry.exported else None
    nnet, path = open_network(name, system_config, db, testiter, str(device), file,
                              precision=entry.precisions[0] if precision == "int8" else precision)
    model = getattr(nnet, "model", None)
    if not entry.exported and model is not None:  # the evaluated weights, not the optimizer's
        size = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        return nnet, size / 2**20
    size = path.stat().st_size + (path.with_suffix(".bin").stat().st_size
                                  if path.suffix == ".xml" else 0)
    return nnet, size / 2**20


def timings(device: torch.device, threads: list[int],
            batches: list[int]) -> list[tuple[str, int, int]]:
    """(column key, threads, batch) of every time a row takes: on a GPU one per batch size
    ("b1", "b8", at the most threads), on a CPU one per thread count and batch size ("1",
    "2" at batch 1 as ever, "1/b8" at batch 8)."""
    if device.type == "cuda":
        return [(f"b{batch}", max(threads), batch) for batch in batches]
    return [(str(t) if batch == 1 else f"{t}/b{batch}", t, batch)
            for t in threads for batch in batches]


def measure(row: str, args: argparse.Namespace, system_config: Any, db: Any, testiter: Any,
            files: dict[str, Path | str], image: torch.Tensor,
            reference: list) -> dict[str, Any]:
    """One row of the table; its failures are its `check`. `image`: one input (1, 3, H, W)."""
    from core.deploy.onnx_graph import compare_outputs
    from core.inference.cornernet import decode_kwargs
    from core.inference.loop import detect

    name, precision = row.split(":")
    result: dict[str, Any] = {"runtime": name, "precision": precision, "AP": None,
                              "AP50": None, "ms": {}, "size_mb": None, "check": None}
    settings = decode_kwargs(db.configs)
    if isinstance(files.get(row), str):  # its file could not be made
        result["check"] = files[row]
        return result
    try:
        nnet, opened = None, None
        for key, threads, size in timings(args.device, args.threads, args.batch):
            set_torch_threads(threads)  # every runtime takes its threads from torch
            if opened != threads:  # the sessions of onnxruntime and OpenVINO fix their threads
                nnet, mib = open_row(row, system_config, db, testiter, files, args.device)
                result["size_mb"], opened = round(mib, 2), threads
            if "parity" not in result:
                got = nnet.test(image.to(nnet.device), **settings)[0].cpu().numpy()
                result["parity"] = compare_outputs([got], reference)
            result["ms"][key] = ms_per_image(nnet, image, size, settings, args.reps)
        set_torch_threads(max(args.threads))
        inds = db.db_inds[:args.images]
        run = detect(db, nnet, system_config, inds, batch_size=1)
        # What score() says (the results file, the table) and what the COCO evaluator prints
        # are not the benchmark's output; nor are the report's pictures (report=False).
        with tempfile.TemporaryDirectory() as folder, redirect_stdout(io.StringIO()):
            metrics = score(db, run.detections, Path(folder),
                            image_ids=[db.image_id(ind) for ind in inds],
                            unreadable=run.unreadable, weights=nnet.evaluated_weights,
                            report=False, log=lambda _: None)
        result["AP"], result["AP50"] = round(metrics["AP"], 4), round(metrics["AP50"], 4)
    except Exception as err:  # noqa: BLE001 - one row fails, the others go on
        why = "not available" if isinstance(err, unavailable()) else "failed"
        result["check"] = f"{why}: {_first_line(err)}"
        if args.debug:  # where the row's one line came from
            traceback.print_exc()
    return result


def judge(rows: list[dict[str, Any]]) -> None:
    """Fill in each measured row's check (see the module docstring)."""
    base = next((row["AP"] for row in rows if (row["runtime"], row["precision"]) == REFERENCE
                 and row["AP"] is not None), None)
    for row in rows:
        if row["check"] is not None:
            continue
        parity = row.pop("parity", {})
        if row["precision"] in runtime(row["runtime"]).exact:
            row["check"] = "passed" if parity.get("ok") else \
                f"failed: {parity.get('error') or 'outside the parity tolerance'}"
        elif base is None:
            row["check"] = f"failed: no {' '.join(REFERENCE)} AP to compare with"
        else:
            loss = base - row["AP"]
            row["check"] = "passed" if loss <= AP_LOSS else \
                f"failed: AP {loss:.3f} below {' '.join(REFERENCE)} (more than {AP_LOSS})"
        row.pop("parity", None)


def ms_per_image(nnet: Any, image: torch.Tensor, batch: int, settings: dict,
                 reps: int) -> float:
    """Median ms per image of `nnet.test` on `batch` copies of `image` (1, 3, H, W), in its
    memory layout, on its device."""
    import torch

    layout = (torch.channels_last if image.is_contiguous(memory_format=torch.channels_last)
              else torch.contiguous_format)
    images = image.expand(batch, -1, -1, -1).contiguous(memory_format=layout).to(nnet.device)
    seconds = median_seconds(lambda: nnet.test(images, **settings), reps, nnet.device)
    return round(1000 * seconds / batch, 1)


def median_seconds(run: Any, reps: int, device: torch.device) -> float:
    """Median seconds of `run()` over `reps` runs after one warm-up (which compiles a
    torch.compile row for this shape); on a GPU, from an idle device to the last kernel's end."""
    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    run()  # warm-up
    times = []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    names = {key: f"ms @{key} thr" if key.isdigit() else
             f"ms/img @{key.replace('/', ' thr ').replace('b', 'batch ')}" for key in columns}
    head = ["runtime", "precision", "AP", "AP50", *names.values(), "size MB", "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["runtime"], row["precision"], _num(row["AP"], 3), _num(row["AP50"], 3),
                 *[_num(row["ms"].get(key), 1) for key in columns], _num(row["size_mb"], 1),
                 row["check"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@keeps_process
def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The benchmark; returns its rows (runtime, precision, AP, AP50, ms, size_mb, check)."""
    import cv2

    from core.dbs import datasets
    from core.deploy.machine import cpu_line, device_line
    from core.inference.cornernet import decode_kwargs, network_input, resize_and_pad
    from core.nnet.checkpoint import default_snapshot
    from core.utils.device import resolve_device

    print(cpu_line())
    try:
        args.device = resolve_device(args.device)
    except ConfigError as err:  # --device cuda without a GPU: every row says so
        rows = args.rows or default_rows("cuda")
        return finish(args, [{"runtime": row.split(":")[0], "precision": row.split(":")[1],
                              "AP": None, "AP50": None, "ms": {}, "size_mb": None,
                              "check": f"not available: {_first_line(err)}"} for row in rows],
                      [])
    args.batch = args.batch or ([1, 8] if args.device.type == "cuda" else [1])
    print(device_line(args.device, args.threads, args.batch), flush=True)
    system_config, db_config = load_config(args.cfg_file, args.config_dir)
    testiter = default_snapshot(system_config, log) if args.testiter is None else args.testiter
    db = lookup(datasets, system_config.dataset, "dataset")(db_config,
                                                            split=system_config.val_split,
                                                            sys_config=system_config)
    rows = args.rows or default_rows(args.device.type)
    files = prepare_files(args, system_config, testiter, rows)
    image = db.read_image(db.db_inds[0])
    canvas = (resize_and_pad(image, db.configs["test_scales"][0])[0] if args.time_size is None
              else cv2.resize(image, (args.time_size, args.time_size)))
    print(f"timed input: Bx3x{canvas.shape[0]}x{canvas.shape[1]}", flush=True)
    # In channels-last memory, as test.py feeds it: CPU convolutions take another path for
    # each layout (bf16 in autocast: oneDNN's for channels-last, ten times slower otherwise).
    one = network_input(canvas[None], db.mean, db.std, "cpu")
    set_torch_threads(args.threads[0])
    nnet, _ = open_network(REFERENCE[0], system_config, db, testiter, str(args.device),
                           precision=REFERENCE[1])  # float32, whatever system.amp says
    reference = [nnet.test(one, **decode_kwargs(db.configs))[0].cpu().numpy()]
    del nnet
    results = []
    for row in rows:
        print(f"measuring {row} ...", flush=True)
        results.append(measure(row, args, system_config, db, testiter, files, one,
                               reference))
        done = results[-1]  # said now, so that a run cut short keeps what it measured
        print(f"  {row}: ms/image {done['ms'] or '-'}, AP {_num(done['AP'], 3)}"
              + (f", {done['check']}" if done["check"] else ""), flush=True)
    judge(results)
    return finish(args, results, [key for key, _, _ in timings(args.device, args.threads,
                                                                args.batch)])


def finish(args: argparse.Namespace, results: list[dict[str, Any]],
           columns: list[str]) -> list[dict[str, Any]]:
    """Print the table (and write the JSON); returns the rows."""
    print(table(results, columns))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
        print(f"wrote {args.json}")
    return results


def below_min_ap(args: argparse.Namespace, results: list[dict[str, Any]]) -> int:
    """1 (said on stderr) when a row's AP is below --min-ap, else 0."""
    if args.min_ap is not None:
        low = [f"{r['runtime']} {r['precision']}" for r in results
               if (r["AP"] is not None and r["AP"] < args.min_ap)
               or (r["AP"] is None and args.rows is not None)]
        if low:
            print(f"AP below --min-ap {args.min_ap} (or not measured): {', '.join(low)}",
                  file=sys.stderr)
            return 1
    return 0


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table, 1 when --min-ap is not met."""
    done: dict[str, Any] = {}

    def work() -> None:
        done["args"] = parse_args(argv, prog)
        done["rows"] = run(done["args"])

    status = exit_status(work, argv=argv)
    if status or "rows" not in done:  # a failure, or --help
        return status
    return below_min_ap(done["args"], done["rows"])


if __name__ == "__main__":
    sys.exit(main())

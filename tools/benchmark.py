#!/usr/bin/env python
"""Every runtime and precision of one snapshot in one table: AP, AP50, ms per image, size, check.

    python tools/benchmark.py <Cfg> [--testiter N|best] [--images N] [--threads 1 2]
                              [--rows RUNTIME:PRECISION ...] [--calib-images N]
                              [--calib-split SPLIT] [--keep-float heads|none] [--reps 3]
                              [--json PATH] [--min-ap AP]

Rows (CPU): torch fp32 and bf16 (autocast), onnxruntime fp32 and int8, OpenVINO f32, default
(the CPU plugin's choice: bf16 where the CPU has bf16 units) and int8. The .onnx file is
exported (tools/export.py, which checks it against torch before writing) when missing, and the
INT8 files are made from it (core/inference/quantize.py, calibrated on --calib-images images of
the training split) when missing. Every row then:

- check: its detections on the first validation image against torch fp32's: "passed" when an
  exact precision (fp32/f32) is within the parity tolerance (shared/reference/README.md section
  6) or a reduced one (bf16, default, int8) has AP within 0.01 of torch fp32's; "failed: why"
  otherwise; "not available: why" when its package or file is missing. A failing row is a row:
  the others still run.
- AP, AP50: the COCO metrics on the first --images images of the validation split (all by
  default), with test.py's inference;
- ms: median ms per image over --reps runs (after one warm-up) of the first validation image as
  test.py feeds it, at each --threads count (default 1 and all cores);
- size_mb: the file the runtime reads (the evaluated weights for torch).

The CPU model and its instruction sets come first. --json writes the rows; --min-ap makes the
exit status 1 when a row's AP is below it (a row that is not available counts only when named
in --rows).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file from a checkout: the project is importable too
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cv2
import torch

from core.config import CONFIG_DIR, load_config, lookup, snapshot_arg
from core.dbs import datasets
from core.engine.cli import run_cli
from core.inference.coco_eval import score
from core.inference.cornernet import decode_kwargs, network_input, resize_and_pad
from core.inference.loop import detect
from core.inference.onnx_runtime import MissingOnnxRuntime, check_identity, onnx_file
from core.inference.openvino_runtime import MissingOpenVino
from core.inference.quantize import (
    calibration_inputs,
    int8_file,
    quantize_onnxruntime,
    quantize_openvino,
)
from core.inference.runtimes import open_network
from core.nnet.export import META_KEYS, compare_outputs

ROWS = ("torch:fp32", "torch:bf16", "onnxruntime:fp32", "onnxruntime:int8", "openvino:f32",
        "openvino:default", "openvino:int8")
EXACT = ("fp32", "f32")
AP_LOSS = 0.01  # a reduced precision passes within this AP of torch fp32
FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_vnni": "AVX-512 VNNI",
         "avx_vnni": "AVX-VNNI", "avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX-BF16",
         "amx_int8": "AMX-INT8"}
ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cfg_file", help="config name in configs/, e.g. CornerNet_Squeeze")
    parser.add_argument("--testiter", type=snapshot_arg, default=None,
                        help="snapshot iteration or 'best' (default: system.max_iter)")
    parser.add_argument("--images", type=int, default=None,
                        help="evaluate the first N validation images (default: all)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=None, metavar="ROW",
                        help=f"the rows to measure (default: all): {' '.join(ROWS)}")
    parser.add_argument("--calib-images", type=int, default=300,
                        help="training images the INT8 files are calibrated on (default 300)")
    parser.add_argument("--calib-split", default=None,
                        help="the split to calibrate on (default: system.train_split)")
    parser.add_argument("--keep-float", choices=("heads", "none"), default="heads",
                        help="INT8: keep the heads' last convolutions in float (default)")
    parser.add_argument("--reps", type=int, default=3, help="timed runs per row (median)")
    parser.add_argument("--time-size", type=int, default=None, metavar="N",
                        help="time on the first validation image resized to N x N (default: "
                             "as test.py feeds it at the first test scale)")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--min-ap", type=float, default=None,
                        help="exit 1 when a row's AP is below this")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = parser.parse_args(argv)
    for name in ("images", "calib_images", "reps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.threads) < 1:
        parser.error("--threads must be at least 1")
    return args


def cpu_line() -> str:
    """The CPU model, its core count and which of AVX2, AVX-512, VNNI, bf16 and AMX it has."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    have = [name for flag, name in FLAGS.items() if flag in flags]
    return (f"CPU: {model}, {os.cpu_count()} cores; instruction sets: "
            f"{', '.join(have) or 'none of AVX2, AVX-512, bf16, AMX'}"
            + ("" if flags else " (no /proc/cpuinfo flags)"))


class Bf16:
    """A torch network whose test path runs under CPU autocast to bfloat16 (float32 out)."""

    def __init__(self, nnet: Any) -> None:
        self.nnet = nnet

    def __getattr__(self, name: str) -> Any:
        return getattr(self.nnet, name)

    def test(self, images: torch.Tensor, **kwargs: Any) -> Any:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            found = self.nnet.test(images, **kwargs)
        return tuple(part.float() if torch.is_tensor(part) else part for part in found)


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


def prepare_files(args: argparse.Namespace, system_config: Any, testiter: Any,
                  rows: list[str]) -> dict[str, Path | str]:
    """{row: file} of every exported row, or {row: why not} ("not available: ..." or
    "failed: ...") where its file could not be made."""
    files: dict[str, Path | str] = {}
    onnx = onnx_file(system_config, testiter)
    if not holds_snapshot(onnx, system_config, testiter) and \
            any(not row.startswith("torch") for row in rows):
        print(f"exporting {onnx} (tools/export.py) ...", flush=True)
        done = subprocess.run([sys.executable, str(ROOT / "tools" / "export.py"),
                               args.cfg_file, "--testiter", str(testiter), "--config-dir",
                               str(args.config_dir)], capture_output=True, text=True,
                              check=False)
        print(done.stdout.strip())
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["no message"])[-1]
            return {row: f"failed: export: {why}" for row in rows if not row.startswith("torch")}
    for row in rows:
        if row.endswith(":int8"):
            files[row] = make_int8(args, system_config, onnx, row.split(":")[0])
        elif not row.startswith("torch"):
            files[row] = onnx
    return files


def make_int8(args: argparse.Namespace, system_config: Any, onnx: Path,
              runtime: str) -> Path | str:
    """The INT8 file of `runtime` beside `onnx`, quantized now unless it is newer than
    `onnx`; why not ("not available: ..." or "failed: ...") when it cannot be made."""
    try:
        out = int8_file(onnx, runtime)
        if out.is_file() and out.stat().st_mtime >= onnx.stat().st_mtime:
            return out
        split = args.calib_split or system_config.train_split
        db_config = load_config(args.cfg_file, args.config_dir)[1]
        db = lookup(datasets, system_config.dataset, "dataset")(db_config, split=split,
                                                                sys_config=system_config)
        scale = db.configs["test_scales"][0]
        inputs = calibration_inputs(db, scale, args.calib_images, log=print)
        start = time.perf_counter()
        quantize = quantize_onnxruntime if runtime == "onnxruntime" else quantize_openvino
        record = quantize(onnx, out, inputs, split, scale, args.keep_float)
        print(f"quantized {out} in {time.perf_counter() - start:.0f} s: {record['images']} "
              f"images of split {split}, float: {len(record['float_layers'])} head convs")
        return out
    except (ImportError, MissingOnnxRuntime, MissingOpenVino) as err:
        return f"not available: {_first_line(err)}"
    except Exception as err:  # noqa: BLE001 - one row fails, the others go on
        return f"failed: quantization: {_first_line(err)}"


def open_row(row: str, system_config: Any, db: Any, testiter: Any,
             files: dict[str, Path | str]) -> tuple[Any, float]:
    """The network of `row` and its size in MiB."""
    runtime, precision = row.split(":")
    if runtime == "torch":
        nnet, _ = open_network("torch", system_config, db, testiter, "cpu")
        model = nnet.ema.module if nnet.evaluated_weights == "ema" else nnet.model
        size = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        return (Bf16(nnet) if precision == "bf16" else nnet), size / 2**20
    path = Path(files[row])
    nnet, _ = open_network(runtime, system_config, db, testiter, "cpu", path,
                           precision="default" if precision == "default" else "f32")
    size = path.stat().st_size + (path.with_suffix(".bin").stat().st_size
                                  if path.suffix == ".xml" else 0)
    return nnet, size / 2**20


def measure(row: str, args: argparse.Namespace, system_config: Any, db: Any, testiter: Any,
            files: dict[str, Path | str], batch: torch.Tensor,
            reference: list) -> dict[str, Any]:
    """One row of the table; its failures are its `check`."""
    runtime, precision = row.split(":")
    result: dict[str, Any] = {"runtime": runtime, "precision": precision, "AP": None,
                              "AP50": None, "ms": {}, "size_mb": None, "check": None}
    settings = decode_kwargs(db.configs)
    if isinstance(files.get(row), str):  # its file could not be made
        result["check"] = files[row]
        return result
    try:
        for threads in args.threads:
            torch.set_num_threads(threads)  # every runtime takes its threads from torch
            nnet, size = open_row(row, system_config, db, testiter, files)
            result["size_mb"] = round(size, 2)
            if threads == args.threads[0]:
                got = nnet.test(batch, **settings)[0].numpy()
                result["parity"] = compare_outputs([got], reference)
            result["ms"][str(threads)] = round(1000 * median_seconds(
                lambda nnet=nnet: nnet.test(batch, **settings), args.reps) / len(batch), 1)
        torch.set_num_threads(max(args.threads))
        inds = db.db_inds[:args.images]
        run = detect(db, nnet, system_config, inds, batch_size=1)
        # score() prints the results file and the per-class table: not the benchmark's output.
        with tempfile.TemporaryDirectory() as folder, redirect_stdout(io.StringIO()):
            metrics = score(db, run.detections, Path(folder),
                            image_ids=[db.image_id(ind) for ind in inds],
                            unreadable=run.unreadable, weights=nnet.evaluated_weights)
        result["AP"], result["AP50"] = round(metrics["AP"], 4), round(metrics["AP50"], 4)
    except (ImportError, MissingOnnxRuntime, MissingOpenVino) as err:
        result["check"] = f"not available: {_first_line(err)}"
    except Exception as err:  # noqa: BLE001 - one row fails, the others go on
        result["check"] = f"failed: {_first_line(err)}"
    return result


def judge(rows: list[dict[str, Any]]) -> None:
    """Fill in each measured row's check (see the module docstring)."""
    base = next((row["AP"] for row in rows if row["runtime"] == "torch" and
                 row["precision"] == "fp32" and row["AP"] is not None), None)
    for row in rows:
        if row["check"] is not None:
            continue
        parity = row.pop("parity", {})
        if row["precision"] in EXACT:
            row["check"] = "passed" if parity.get("ok") else \
                f"failed: {parity.get('error') or 'outside the parity tolerance'}"
        elif base is None:
            row["check"] = "failed: no torch fp32 AP to compare with"
        else:
            loss = base - row["AP"]
            row["check"] = "passed" if loss <= AP_LOSS else \
                f"failed: AP {loss:.3f} below torch fp32 (more than {AP_LOSS})"
        row.pop("parity", None)


def median_seconds(run: Any, reps: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def table(rows: list[dict[str, Any]], threads: list[int]) -> str:
    head = ["runtime", "precision", "AP", "AP50", *[f"ms @{t} thr" for t in threads],
            "size MB", "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["runtime"], row["precision"], _num(row["AP"], 3), _num(row["AP50"], 3),
                 *[_num(row["ms"].get(str(t)), 1) for t in threads], _num(row["size_mb"], 1),
                 row["check"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The benchmark; returns the exit status (1 when --min-ap is not met)."""
    args = parse_args(argv)
    print(cpu_line())
    print(f"threads: {' and '.join(map(str, args.threads))}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    system_config, db_config = load_config(args.cfg_file, args.config_dir)
    testiter = system_config.max_iter if args.testiter is None else args.testiter
    db = lookup(datasets, system_config.dataset, "dataset")(db_config,
                                                            split=system_config.val_split,
                                                            sys_config=system_config)
    rows = args.rows or list(ROWS)
    files = prepare_files(args, system_config, testiter, rows)
    image = db.read_image(db.db_inds[0])
    canvas = (resize_and_pad(image, db.configs["test_scales"][0])[0] if args.time_size is None
              else cv2.resize(image, (args.time_size, args.time_size)))
    print(f"timed input: 1x3x{canvas.shape[0]}x{canvas.shape[1]}", flush=True)
    batch = network_input(canvas[None], db.mean, db.std, "cpu").contiguous()
    torch.set_num_threads(args.threads[0])
    nnet, _ = open_network("torch", system_config, db, testiter, "cpu")
    reference = [nnet.test(batch, **decode_kwargs(db.configs))[0].numpy()]
    results = []
    for row in rows:
        print(f"measuring {row} ...", flush=True)
        results.append(measure(row, args, system_config, db, testiter, files, batch,
                               reference))
    judge(results)
    print(table(results, args.threads))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
        print(f"wrote {args.json}")
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


def _exit(status: int) -> None:
    if status:
        sys.exit(status)


if __name__ == "__main__":
    run_cli(lambda: _exit(main()))

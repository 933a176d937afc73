"""One row of the benchmark (`runtime:precision`): how fast, how accurate, and its verdict.

A row is a dict, as the benchmark's JSON writes it: runtime, precision, AP, AP50, ms ({column:
median ms per image}), size_mb (the file the runtime reads; the evaluated weights for torch)
and check. `measure_row` fills it for one row, `judge` gives every measured row its check:

- "passed" when an exact precision of its runtime (`Runtime.exact`: fp32, f32, compile) gives
  detections on the first validation image within the parity tolerance of torch fp32's
  (shared/reference/README.md section 6), or a reduced one (bf16, default, int8) has AP within
  `AP_LOSS` of torch fp32's; "failed: why" otherwise;
- "not available: why" when its package, file, compiler or GPU is missing. A failing row is a
  row: the others still run.

The rows and the precisions each runtime offers come from the registry (core/deploy/runtimes.py:
`all_rows`, `default_rows`), so a runtime registered from outside has rows too.
"""

from __future__ import annotations

import io
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import torch

from ..inference.coco_eval import score
from ..inference.cornernet import decode_kwargs
from ..inference.loop import detect
from ..utils.threads import set_torch_threads
from .onnx_graph import compare_outputs
from .runtimes import DEFAULT, open_network, runtime, unavailable

# The reference row: the default runtime in float32 (every other row is checked against it).
REFERENCE = (DEFAULT, "fp32")
AP_LOSS = 0.01  # a reduced precision passes within this AP of torch fp32


def empty_row(row: str, check: str | None = None) -> dict[str, Any]:
    """Row `row` with nothing measured (yet); `check`: why not, when it cannot be."""
    name, precision = row.split(":")
    return {"runtime": name, "precision": precision, "AP": None, "AP50": None, "ms": {},
            "size_mb": None, "check": check}


def timings(device: torch.device, threads: list[int],
            batches: list[int]) -> list[tuple[str, int, int]]:
    """(column key, threads, batch) of every time a row takes: on a GPU one per batch size
    ("b1", "b8", at the most threads), on a CPU one per thread count and batch size ("1",
    "2" at batch 1 as ever, "1/b8" at batch 8)."""
    if device.type == "cuda":
        return [(f"b{batch}", max(threads), batch) for batch in batches]
    return [(str(t) if batch == 1 else f"{t}/b{batch}", t, batch)
            for t in threads for batch in batches]


def open_row(row: str, system_config: Any, db: Any, testiter: Any,
             files: dict[str, Path | str], device: torch.device,
             threads: int | None = None) -> tuple[Any, float]:
    """The network of `row` on `device`, computing on `threads` CPU threads (None: as
    `choose_threads` decides), and its size in MiB."""
    name, precision = row.split(":")
    entry = runtime(name)
    file = Path(files[row]) if entry.exported else None
    nnet, path = open_network(name, system_config, db, testiter, str(device), file,
                              precision=entry.precisions[0] if precision == "int8" else precision,
                              threads=threads)
    model = getattr(nnet, "model", None)
    if not entry.exported and model is not None:  # the evaluated weights, not the optimizer's
        size = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        return nnet, size / 2**20
    size = path.stat().st_size + (path.with_suffix(".bin").stat().st_size
                                  if path.suffix == ".xml" else 0)
    return nnet, size / 2**20


def measure_row(row: str, system_config: Any, db: Any, testiter: Any,
                files: dict[str, Path | str], image: torch.Tensor, reference: list, *,
                device: torch.device, threads: list[int], batches: list[int], reps: int,
                images: int | None, trace: Callable[[str], None] | None = None
                ) -> dict[str, Any]:
    """One row of the table; its failures are its `check` (their traceback to `trace`).
    `image`: one input (1, 3, H, W); `reference`: torch fp32's detections of it."""
    result = empty_row(row)
    settings = decode_kwargs(db.configs)
    if isinstance(files.get(row), str):  # its file could not be made
        result["check"] = files[row]
        return result
    try:
        nnet, opened = None, None
        for key, count, size in timings(device, threads, batches):
            if opened != count:  # the sessions of onnxruntime and OpenVINO fix their threads
                # opened on `count` threads: opening sets torch's threads, so they are set by it
                nnet, mib = open_row(row, system_config, db, testiter, files, device, count)
                result["size_mb"], opened = round(mib, 2), count
            set_torch_threads(count)  # every runtime takes its threads from torch
            if "parity" not in result:
                got = nnet.test(image.to(nnet.device), **settings)[0].cpu().numpy()
                result["parity"] = compare_outputs([got], reference)
            result["ms"][key] = ms_per_image(nnet, image, size, settings, reps)
        set_torch_threads(max(threads))
        inds = db.db_inds[:images]
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
        result["check"] = f"{why}: {first_line(err)}"
        if trace is not None:  # where the row's one line came from
            trace(traceback.format_exc())
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
    layout = (torch.channels_last if image.is_contiguous(memory_format=torch.channels_last)
              else torch.contiguous_format)
    images = image.expand(batch, -1, -1, -1).contiguous(memory_format=layout).to(nnet.device)
    seconds = median_seconds(lambda: nnet.test(images, **settings), reps, nnet.device)
    return round(1000 * seconds / batch, 1)


def median_seconds(run: Callable[[], Any], reps: int, device: torch.device) -> float:
    """Median seconds of `run()` over `reps` runs after one warm-up (which compiles a
    torch.compile row for this shape); on a GPU, from an idle device to the last kernel's end."""
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


def first_line(err: BaseException) -> str:
    """The first line of an error's message (its class's name when it has none)."""
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__

"""The GPU run, in one command that keeps every figure even when it is cut short:

    python bench/gpu_check.py --budget 360 --log $OUT/gpu_check.log

Steps, most valuable first (`--list` shows them with their expected and running seconds, and
where 8 minutes of GPU, machine start included, end; `--only`/`--skip` pick): the training
step of CornerNet_Squeeze at batch 55 profiled (bf16 in one forward, in the shipped chunks, with
channels_last; its breakdown; one torch.profiler step), compiled at the new defaults (compile
seconds apart from images/s; a failure's whole traceback) and checked for syncs
(torch.cuda.set_sync_debug_mode over non-display steps); 20 iterations of train.py for
CornerNet_Squeeze at the new defaults; the CUDA tests; test.py and demo.py with its snapshot;
its bench_train rows; tools/benchmark.py's GPU rows of CornerNet_Squeeze (torch fp32, bf16 and
torch.compile, ms per image at batch 1 and 8, random weights); the same training for
CornerNet_Tiny (generated shapes), CornerNet_Saccade and CornerNet; system.deterministic (two
runs and a resume give equal losses); the other configs' test.py, demo.py and bench rows;
`train.py --dry-run`; two-GPU training when there are two GPUs.

Each row is printed and appended to `--log` the moment its step ends; with `--budget` a step
that cannot finish in the time left is "not run (budget)" and the table is out before the
deadline; the last line names the command that runs the rest. Data: `--data DIR` (or
CORNERNET_DATA), else ../shared, else ./shared (bench/gpu_prep.sh fills it); without coco128 the
training rows use generated shapes. Without a COCO evaluator the test.py rows say "not scored".
Exit status: 2 without a usable GPU (one line), 1 when a step failed, else 0.
`--rehearse` runs all this on the CPU in a copy of the repository (bench/_rehearsal.py).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import _shared
from bench._plan import GROUPS, PLAN_S, Context, in_plan, plan_order
from bench._steps import Steps

CONFIGS = ("CornerNet_Tiny", "CornerNet_Squeeze", "CornerNet_Saccade", "CornerNet")


def header_lines(device: str) -> list[str]:
    """nvidia-smi -L, the torch/CUDA/cuDNN versions, df -h /dev/shm: what the machine is."""
    import torch
    lines = []
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20,
                             check=False)
        lines += [f"nvidia-smi -L: {line}" for line in (smi.stdout + smi.stderr).splitlines()
                  if line.strip()] or ["nvidia-smi -L: (no output)"]
    except (OSError, subprocess.SubprocessError) as err:
        lines.append(f"nvidia-smi -L: not run ({err})")
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    lines.append(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
                 f"{torch.backends.cudnn.version()}, Python {sys.version.split()[0]}, "
                 f"{os.cpu_count()} CPUs, GPUs: {', '.join(gpus) or 'none'}; steps on {device}")
    try:
        df = subprocess.run(["df", "-h", "/dev/shm"], capture_output=True, text=True,
                            timeout=20, check=False)
        lines += [f"df -h /dev/shm: {line}" for line in df.stdout.splitlines()[-1:]] or \
            [f"df -h /dev/shm: {df.stderr.strip()}"]
    except (OSError, subprocess.SubprocessError) as err:
        lines.append(f"df -h /dev/shm: not run ({err})")
    return lines


def require_gpu() -> None:
    """Exits 2 with one line where torch sees no GPU."""
    import torch
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        print(f"error: gpu_check needs a CUDA GPU; torch {torch.__version__} ({build}) sees none. "
              f"Run it on a machine with a GPU and a CUDA build of torch (or --rehearse here).",
              file=sys.stderr)
        sys.exit(2)


def evaluator() -> str:
    """The COCO evaluator test.py can use here: "faster", "pycocotools" or "none"."""
    for backend, module in (("faster", "faster_coco_eval"), ("pycocotools", "pycocotools.coco")):
        try:
            __import__(module)
            return backend
        except ImportError:
            continue
    return "none"


def write_configs(root: Path, coco128: Path | None, tiny: bool = False,
                  **system: object) -> Path:
    """The shipped configs for 20 iterations (unless `system` says otherwise), their data on
    coco128 (Tiny, and every config when `coco128` is None: generated shapes), every path under
    `root`. `tiny`: CPU sizes for a rehearsal (batch 2 in one chunk, 2 iterations; the
    single-scale configs run the CornerNet_Tiny network at 128 pixels)."""
    folder = root / "configs"
    folder.mkdir(parents=True, exist_ok=True)
    for name in CONFIGS:
        config = json.loads((REPO / "configs" / f"{name}.json").read_text())
        config["system"].update({
            "max_iter": 20, "snapshot": 20, "display": 5, "val_iter": 10, "eval_iter": 0,
            "stepsize": 1000, "cache_dir": str(root / "cache"),
            "result_dir": str(root / "results"), "data_dir": str(root / "data")})
        if tiny:
            config["system"].update(batch_size=2, chunk_sizes=None, max_iter=2, snapshot=2,
                                    display=1, val_iter=0, prefetch_size=2)
            if config["system"]["sampling_function"] == "cornernet":
                config["system"]["model"] = "CornerNet_Tiny"
                config["db"].update(input_size=[128, 128], output_sizes=[[32, 32]])
        config["system"].update(system)
        if name == "CornerNet_Tiny" or coco128 is None:
            config["system"].update(dataset="Shapes", train_split="train", val_split="val",
                                    test_split="val")
            config["db"].update(categories=4, num_train_images=256, num_val_images=32)
        else:
            config["system"].update(train_split="train", val_split="val", test_split="val")
            config["db"].update(
                image_dirs={"train": str(coco128 / "images"), "val": str(coco128 / "images")},
                annotation_files={split: str(coco128 / "annotations" /
                                             f"instances_coco128_{split}.json")
                                  for split in ("train", "val")})
        (folder / f"{name}.json").write_text(json.dumps(config, indent=1))
    return folder


def fit_workers(config_dir: Path, name: str, workers: int) -> int:
    """The most prefetch workers, up to `workers`, whose rings fit the free /dev/shm (train.py
    refuses a run that does not fit; a small /dev/shm costs workers, not the row)."""
    from core.config import load_config
    from core.data.ring import shm_need
    from core.utils.files import disk_free
    if not Path("/dev/shm").is_dir():
        return workers
    free = disk_free(Path("/dev/shm"))
    system_config, db_config = load_config(name, config_dir)
    for count in range(workers, 0, -1):
        if shm_need(db_config, system_config.sampling_function, system_config.batch_size,
                    count, prefetch_size=system_config.prefetch_size,
                    validation=bool(system_config.val_iter)) <= 0.9 * free:
            return count
    return 1


def select(only: list[str], skip: list[str], gpus: int) -> list[str]:
    """Group keys to run, in plan order: `--only` patterns (and what they need), less `--skip`."""
    keys = plan_order(gpus)
    for pattern in only + skip:
        if not any(fnmatch.fnmatch(key, pattern) for key in GROUPS):
            raise ValueError(f"no step group matches {pattern!r}; valid: "
                             f"{', '.join(GROUPS)}")
    chosen = [k for k in keys if not only or any(fnmatch.fnmatch(k, p) for p in only)]
    for key in list(chosen):
        chosen += [need for need in GROUPS[key].needs if need not in chosen]
    chosen = [k for k in keys if k in chosen and not any(fnmatch.fnmatch(k, p) for p in skip)]
    return chosen


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="the table is out within this many seconds of the start; a step "
                             "that cannot finish in the time left is not run")
    parser.add_argument("--log", type=Path, default=None,
                        help="append each row to this file the moment its step ends")
    parser.add_argument("--data", type=Path, default=None,
                        help="a folder laid out like shared/ (data/coco128) or coco128 itself "
                             f"(default: ${_shared.ENV}, ../shared, ./shared)")
    parser.add_argument("--only", nargs="+", default=[], metavar="GROUP",
                        help="run these step groups (shell patterns; --list names them)")
    parser.add_argument("--skip", nargs="+", default=[], metavar="GROUP")
    parser.add_argument("--list", action="store_true", help="print the step groups and stop")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                        help="prefetch processes per training process (fewer where /dev/shm "
                             "is too small)")
    parser.add_argument("--scratch", type=Path, default=None,
                        help="folder for configs, snapshots and step outputs (default: new)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: the same steps at CPU sizes (what --rehearse runs)")
    parser.add_argument("--rehearse", action="store_true",
                        help="run the check on this CPU in a copy of the repository with no "
                             "../shared and no COCO evaluator, and check what it wrote")
    args = parser.parse_args(argv)
    if args.budget is not None and not (math.isfinite(args.budget) and args.budget > 0):
        parser.error(f"--budget must be a finite number of seconds greater than 0, got "
                     f"{args.budget}")
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    return args


def _header(args: argparse.Namespace, keys: list[str], scratch: Path, coco128: Path | None,
            backend: str) -> list[str]:
    """The machine's lines, then where the data is, the evaluator, the budget and the groups."""
    header = header_lines(args.device)
    header.append(f"coco128: {coco128}" if coco128 else
                  f"coco128: not found (looked in {_shared.looked_in()}): training and test rows "
                  f"use generated shapes, bench rows are not run")
    header.append(f"COCO evaluator: {backend}" + (
        " (test.py rows are not scored)" if backend == "none" else ""))
    header.append(f"budget: {args.budget or 'none'} s; groups: {' '.join(keys)}; scratch "
                  f"{scratch}")
    return header


def _context(args: argparse.Namespace, steps: Steps, scratch: Path, coco128: Path | None,
             backend: str, gpus: int) -> Context:
    """What every group runs with: configs written under `scratch`, workers /dev/shm holds."""
    tiny = args.device == "cpu"
    ctx = Context(steps=steps, py=sys.executable, device=args.device, root=scratch,
                  coco128=coco128, backend=backend, gpus=gpus, tiny=tiny,
                  configs=write_configs(scratch, coco128, tiny=tiny),
                  workers={name: fit_workers(scratch / "configs", name, args.workers)
                           for name in CONFIGS},
                  write_configs=write_configs)
    if any(w < args.workers for w in ctx.workers.values()):
        steps.say(f"/dev/shm holds fewer prefetch workers than --workers {args.workers}: "
                  + ", ".join(f"{name} {w}" for name, w in ctx.workers.items()))
    return ctx


def _run_groups(keys: list[str], ctx: Context) -> set[str]:
    """Run each group whose needs succeeded; the groups that ran to their end (passed or
    failed), for the line that runs the rest."""
    steps = ctx.steps
    done = set()
    for key in keys:
        missing = [need for need in GROUPS[key].needs if need not in ctx.succeeded]
        if missing:
            steps.add(key, "not run", 0.0, f"needs {', '.join(missing)}, which did not succeed")
            continue
        first = len(steps.rows)
        GROUPS[key].run(ctx)
        statuses = [row.status for row in steps.rows[first:]]
        if not any(status.endswith("(budget)") for status in statuses):
            done.add(key)
        if statuses and all(status == "ok" for status in statuses):
            ctx.succeeded.add(key)
    return done


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rehearse:
        from bench._rehearsal import rehearse
        return rehearse(REPO, args.budget, args.log)
    if args.data is not None:
        if not args.data.is_dir():
            print(f"error: --data {args.data}: no such folder", file=sys.stderr)
            return 2
        os.environ[_shared.ENV] = str(args.data.resolve())  # the steps' tests and benches too
    import torch
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    try:
        keys = select(args.only, args.skip, gpus)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.list:
        cpu, order = args.device == "cpu", plan_order(gpus)
        fits, total = in_plan(order, cpu), 0.0
        for key in order:
            group = GROUPS[key]
            total += group.need(cpu)
            print(f"{key:22s} ~{group.need(cpu):4.0f} s {total:5.0f} s  {group.about}")
            if fits and key == fits[-1]:
                print(f"---- the plan: these {len(fits)} groups, ~{total:.0f} s, within 8 minutes "
                      f"with the machine's ~2 min start (--budget {PLAN_S}); the rest: --only")
        return 0
    if args.device == "cuda":
        require_gpu()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="gpu_check-"))
    scratch.mkdir(parents=True, exist_ok=True)
    steps = Steps(scratch, args.budget, args.log)
    coco128 = _shared.coco128_dir()
    backend = evaluator()
    header = _header(args, keys, scratch, coco128, backend)
    for line in header:
        steps.say(line)
    done = _run_groups(keys, _context(args, steps, scratch, coco128, backend, gpus))
    print()
    steps.say(steps.table(header))
    rest = [key for key in keys if key not in done]
    if rest:
        steps.say("the rest: python bench/gpu_check.py --only " + " ".join(rest)
                  + (f" --data {args.data}" if args.data else "")
                  + (f" --budget {args.budget:.0f}" if args.budget else ""))
    if args.scratch is None and not steps.failed:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if steps.failed else 0


if __name__ == "__main__":
    sys.exit(main())

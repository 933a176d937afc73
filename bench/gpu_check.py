"""The first run on a GPU, in one command (under 10 minutes on one GPU):

    python bench/gpu_check.py [--quick]

1. the CUDA tests (tests/test_cuda.py, tests/test_device.py);
2. 20 iterations of train.py for each shipped config on one GPU, and on two when there are two
   (CornerNet, CornerNet_Squeeze, CornerNet_Saccade on coco128 with their shipped batch and
   chunks; CornerNet_Tiny on its generated shapes);
3. system.deterministic: two runs give the same losses, and a resumed run the losses of the
   uninterrupted one;
4. test.py and demo.py with each 20-iteration snapshot on a few coco128 images;
5. train.py --dry-run;
6. one bench/bench_train.py row per config and mode (fp32, bf16, bf16+cl, fp32+det);
then a table: step, status, seconds, what it measured (images/s, data wait, peak memory).
A machine without a usable GPU is one line, exit status 2, at once. Exit status 1 when a step
failed (its output's last lines are printed), 0 when all passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COCO128 = REPO.parent / "shared" / "data" / "coco128"
CONFIGS = ("CornerNet_Tiny", "CornerNet_Squeeze", "CornerNet_Saccade", "CornerNet")
# bench_train's per-process batch for each config: large enough to load the GPU, small enough
# for fp32 on a 40 GB card.
BENCH_BATCH = {"CornerNet_Tiny": 32, "CornerNet_Squeeze": 16, "CornerNet_Saccade": 24,
               "CornerNet": 8}
MODES = ("fp32", "bf16", "bf16+cl", "fp32+det")


def require_gpu() -> str:
    """A line naming the GPUs; exits 2 with one line where torch sees none."""
    import torch
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        print(f"error: gpu_check needs a CUDA GPU; torch {torch.__version__} ({build}) sees none. "
              f"Run it on a machine with a GPU and a CUDA build of torch.", file=sys.stderr)
        sys.exit(2)
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return (f"{len(names)} x {names[0]}" + (f" (+ {', '.join(names[1:])})" if len(set(names)) > 1
                                            else "")
            + f", torch {torch.__version__}, CUDA {torch.version.cuda}, "
              f"cuDNN {torch.backends.cudnn.version()}")


class Steps:
    """Runs commands, keeps one table row per step."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, float, str]] = []

    def run(self, name: str, cmd: list, timeout: float, measure=None,
            env: dict | None = None) -> str | None:
        """Run `cmd`; the row's detail is measure(output) (or the last line). Returns the output
        when it succeeded."""
        t0 = time.monotonic()
        print(f"--- {name}: {' '.join(map(str, cmd))}", flush=True)
        try:
            done = subprocess.run(list(map(str, cmd)), cwd=REPO, capture_output=True, text=True,
                                  timeout=timeout, env={**os.environ, **(env or {})},
                                  check=False)
            output, ok = done.stdout + done.stderr, done.returncode == 0
            status = "ok" if ok else f"FAIL ({done.returncode})"
        except subprocess.TimeoutExpired as err:
            output = (err.stdout or b"").decode(errors="replace") if isinstance(
                err.stdout, bytes) else (err.stdout or "")
            ok, status = False, f"FAIL (over {timeout:.0f} s)"
        seconds = time.monotonic() - t0
        lines = [line for line in output.splitlines() if line.strip()]
        detail = (measure(output) if ok and measure else None) or (lines[-1] if lines else "")
        if not ok:
            print("\n".join(lines[-25:]), flush=True)
        self.rows.append((name, status, seconds, detail[:90]))
        return output if ok else None

    def note(self, name: str, status: str, detail: str) -> None:
        self.rows.append((name, status, 0.0, detail))

    def table(self, header: str) -> str:
        width = max(len(row[0]) for row in self.rows)
        lines = [header, f"{'step':{width}s}  {'status':14s} {'seconds':>7s}  detail"]
        lines += [f"{n:{width}s}  {s:14s} {t:7.0f}  {d}" for n, s, t, d in self.rows]
        return "\n".join(lines)

    @property
    def failed(self) -> bool:
        return any(row[1].startswith("FAIL") for row in self.rows)


def write_configs(root: Path, coco128: Path, **system) -> Path:
    """The shipped configs for 20 iterations (unless `system` says otherwise), their data on
    coco128 (Tiny: generated shapes), every path under `root`."""
    folder = root / "configs"
    folder.mkdir(parents=True, exist_ok=True)
    for name in CONFIGS:
        config = json.loads((REPO / "configs" / f"{name}.json").read_text())
        config["system"].update({
            "max_iter": 20, "snapshot": 20, "display": 5, "val_iter": 10, "eval_iter": 0,
            "stepsize": 1000, "cache_dir": str(root / "cache"),
            "result_dir": str(root / "results"), "data_dir": str(root / "data"), **system})
        if name == "CornerNet_Tiny":
            config["db"].update(num_train_images=256, num_val_images=32)
        else:
            config["system"].update(train_split="train", val_split="val", test_split="val")
            config["db"].update(
                image_dirs={"train": str(coco128 / "images"), "val": str(coco128 / "images")},
                annotation_files={split: str(coco128 / "annotations" /
                                             f"instances_coco128_{split}.json")
                                  for split in ("train", "val")})
        (folder / f"{name}.json").write_text(json.dumps(config, indent=1))
    return folder


def training_figures(output: str) -> str:
    """images/s and data wait of the last display line, and the done line's overall wait."""
    shown = re.findall(r"([\d.]+) images/s, waiting for data ([\d.]+%)", output)
    done = re.search(r"waiting for data ([\d.]+%) of the time", output)
    if not shown:
        return done.group(0) if done else ""
    speed, wait = shown[-1]
    return f"{speed} images/s, data wait {wait} (whole run {done.group(1) if done else '?'})"


def peak_memory(cache: Path, name: str) -> str:
    path = cache / "nnet" / name / "metrics.jsonl"
    if not path.is_file():
        return ""
    peaks = [json.loads(line).get("gpu_mem_gib") for line in path.read_text().splitlines()
             if line.strip()]
    peaks = [p for p in peaks if p is not None]
    return f", peak {max(peaks):.1f} GiB" if peaks else ""


def losses(output: str) -> dict[int, str]:
    return {int(it): loss for it, loss in re.findall(r"iteration (\d+): loss (\S+) ", output)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                        help="prefetch processes per training process")
    parser.add_argument("--quick", action="store_true", help="leave out the benchmark rows")
    args = parser.parse_args()
    header = require_gpu()
    if not (COCO128 / "annotations" / "instances_coco128_train.json").is_file():
        print(f"error: coco128 not found at {COCO128}: put shared/data/coco128 beside the "
              f"repository, as the tests expect", file=sys.stderr)
        return 2
    import torch
    gpus = torch.cuda.device_count()
    print(header, flush=True)
    steps, py = Steps(), sys.executable
    root = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    configs = write_configs(root, COCO128)
    cache = root / "cache"
    train = [py, "train.py", "--config-dir", configs, "--workers", args.workers]

    steps.run("CUDA tests", [py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                             "tests/test_cuda.py", "tests/test_device.py"], timeout=300,
              measure=lambda out: out.strip().splitlines()[-1].strip("= "))
    for name in CONFIGS:
        steps.run(f"train {name}, 1 GPU", [*train, name, "--device", "cuda"], timeout=240,
                  measure=lambda out, name=name: training_figures(out)
                  + peak_memory(cache, name))
    if gpus >= 2:
        two = write_configs(root / "two", COCO128)
        for name in CONFIGS:
            steps.run(f"train {name}, 2 GPUs",
                      [py, "train.py", name, "--config-dir", two, "--workers", args.workers,
                       "--distributed", "--world-size", 1, "--procs-per-node", 2],
                      timeout=240, measure=training_figures)

    det = write_configs(root / "det", COCO128, deterministic=True, max_iter=6, snapshot=3,
                        display=1, val_iter=0)
    runs = [steps.run(f"deterministic CornerNet_Squeeze, run {i}",
                      [py, "train.py", "CornerNet_Squeeze", "--config-dir", det, "--workers",
                       args.workers, "--device", "cuda"], timeout=240,
                      measure=training_figures) for i in (1, 2)]
    resumed = steps.run("deterministic CornerNet_Squeeze, --iter 3",
                        [py, "train.py", "CornerNet_Squeeze", "--config-dir", det, "--workers",
                         args.workers, "--device", "cuda", "--iter", 3], timeout=240)
    if all(runs) and resumed:
        first, second, third = losses(runs[0]), losses(runs[1]), losses(resumed)
        equal = first == second and bool(first)
        steps.note("deterministic: two runs equal", "ok" if equal else "FAIL",
                   f"losses of iterations {sorted(first)}: {'equal' if equal else 'DIFFER'}")
        later = {it: loss for it, loss in first.items() if it > 3}
        same = later == {it: third.get(it) for it in later} and bool(later)
        steps.note("deterministic: resume exact", "ok" if same else "FAIL",
                   f"losses after iteration 3: {'equal' if same else 'DIFFER'}")

    images = sorted((COCO128 / "images").iterdir())[:4]
    for name in CONFIGS[1:]:
        steps.run(f"test.py {name}, 8 images",
                  [py, "test.py", name, "--testiter", 20, "--config-dir", configs, "--images",
                   8, "--device", "cuda", "--no-resume"], timeout=180,
                  measure=lambda out: next((line for line in out.splitlines()
                                            if " images in " in line), ""))
        steps.run(f"demo.py {name}, 4 images",
                  [py, "demo.py", name, "--testiter", 20, "--config-dir", configs, "--images",
                   *images, "--out", root / "demo" / name, "--thresh", 0.3], timeout=120)
    steps.run("train.py --dry-run 20, CornerNet", [*train, "CornerNet", "--dry-run", 20],
              timeout=180, measure=lambda out: " ".join(out.split())[-90:])

    if not args.quick:
        for name in CONFIGS:
            output = steps.run(
                f"bench_train {name}", [py, "bench/bench_train.py", "--configs", name,
                                        "--modes", *MODES, "--workers", args.workers,
                                        "--batch", BENCH_BATCH[name], "--iters", 8,
                                        "--warmup", 2, "--no-breakdown"], timeout=300,
                measure=lambda out: "see rows below")
            for line in (output or "").splitlines():
                if line.startswith(name) and any(f" {mode} " in line for mode in MODES):
                    parts = line.split()
                    steps.note(f"  {parts[0]} {parts[1]} batch {BENCH_BATCH[name]}",
                               "out of memory" if "out of memory" in line else "ok",
                               " ".join(parts[2:]) if "out of memory" in line else
                               f"{parts[3]} images/s, data wait {parts[4]}, peak {parts[5]} GiB")
    print(steps.table(header))
    print(f"(scratch files in {root})")
    return 1 if steps.failed else 0


if __name__ == "__main__":
    sys.exit(main())

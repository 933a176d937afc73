"""gpu_check's step groups, most valuable first, each with the time it is expected to take.

A group is one or more commands (rows). Expected seconds are for one GPU and, apart, for the CPU
sizes of a rehearsal. The GPU figures are measured on one NVIDIA H200 (torch 2.11+cu130;
bench/README.md). The first run (2026-11-27, eager steps): bench-squeeze 67, deploy-gpu 107,
train-tiny 27, bench-squeeze-more 37, bench-cornernet 76, dry-run 12. The second (2026-11-29,
at the GPU defaults: bf16, compiled, one forward): cuda-tests 19, profile 103, compile 197 (a
cold compile of Squeeze's step: 175 s), sync-check 19, test-shapes 16, train-squeeze 111 (the
compile group's inductor cache warm), test-squeeze-b8 10, test-squeeze 14 (test.py 8 + demo.py
6). Estimates, not measured: bench-tiny and bench-saccade (bench-cornernet's figure); at the
compiled defaults, the training of Saccade and CornerNet and the deterministic group (their
eager figures plus a cold compile of their own, which the second run's deterministic group,
cut at 121 s in its first run, showed it needs). Where a group has several commands and only
its total was measured, the total is shared between them. The budget uses them to decide
whether a command is started at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench._steps import Steps

# bench_train's per-process batch for each config: large enough to load the GPU, small enough
# for fp32 on a 40 GB card.
BENCH_BATCH = {"CornerNet_Tiny": 32, "CornerNet_Squeeze": 16, "CornerNet_Saccade": 24,
               "CornerNet": 8}
SHORT = {"CornerNet_Tiny": "tiny", "CornerNet_Squeeze": "squeeze",
         "CornerNet_Saccade": "saccade", "CornerNet": "cornernet"}
BENCH_ITERS, BENCH_WARMUP = 30, 5


@dataclass
class Context:
    """What the groups share: the runner, the machine and the data."""

    steps: Steps
    py: str
    device: str  # "cuda", or "cpu" for a rehearsal at CPU sizes
    root: Path
    coco128: Path | None
    backend: str  # test.py --backend: faster, pycocotools or none
    gpus: int
    tiny: bool
    configs: Path
    workers: dict[str, int]
    write_configs: Callable[..., Path]
    succeeded: set[str] = field(default_factory=set)

    def t(self, gpu: float, cpu: float) -> float:
        """The expected seconds of a command on this run's device."""
        return cpu if self.tiny else gpu

    def train_cmd(self, name: str, configs: Path | None = None) -> list:
        return [self.py, "train.py", name, "--config-dir", configs or self.configs,
                "--workers", self.workers[name], "--device", self.device]


@dataclass
class Group:
    about: str
    gpu: float  # expected seconds on one H100 (all its commands)
    cpu: float  # ... at the CPU sizes of a rehearsal
    run: Callable[[Context], None]
    needs: tuple[str, ...] = ()

    def need(self, cpu: bool) -> float:
        return self.cpu if cpu else self.gpu


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


def where(ctx: Context, name: str) -> str:
    data = "shapes" if name == "CornerNet_Tiny" or ctx.coco128 is None else "coco128"
    if ctx.device == "cuda":
        return f"1 GPU, {data}, {ctx.workers[name]} workers"
    network = "" if name == "CornerNet_Saccade" else ", CornerNet_Tiny network"
    return f"CPU{network}, {data}, {ctx.workers[name]} workers"


def cuda_tests(ctx: Context) -> None:
    # On a CPU they skip, saying why; test_device.py's CPU half is CI's, not the rehearsal's.
    files = ["tests/core/nnet/test_cuda.py"] + ([] if ctx.tiny else
                                                ["tests/core/utils/test_device.py"])
    ctx.steps.run("CUDA tests", [ctx.py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                                 *files],
                  timeout=300, need=ctx.t(19, 20),
                  measure=lambda out: out.strip().splitlines()[-1].strip("= "))


# Seconds of one GPU run (see the module's docstring). Squeeze's: with the compile group's cache
# warm (cold, add ~150 s); Saccade's and CornerNet's: eager figures plus an estimated cold
# compile, which is their first step at the GPU defaults.
COLD_COMPILE_S = 150
TRAIN_S = {"CornerNet_Tiny": 27, "CornerNet_Squeeze": 111,
           "CornerNet_Saccade": 43 + COLD_COMPILE_S, "CornerNet": 57 + COLD_COMPILE_S}
# The deterministic group's runs: the first pays its own cold compile, then a second and a resume.
DETERMINISTIC_S = (23 + COLD_COMPILE_S, 23, 30)
TEST_DEMO_S = {"CornerNet_Squeeze": (8, 6), "CornerNet_Saccade": (12, 6), "CornerNet": (12, 6)}
BENCH_S = {"bench-squeeze": 67, "bench-squeeze-more": 37, "bench-cornernet": 76,
           "bench-tiny": 76, "bench-saccade": 76}  # the last two: not measured


def train(name: str) -> Callable[[Context], None]:
    def run(ctx: Context) -> None:
        ctx.steps.run(f"train {name} ({where(ctx, name)})", ctx.train_cmd(name),
                      timeout=420, need=ctx.t(TRAIN_S[name], 25),
                      measure=lambda out: training_figures(out)
                      + peak_memory(ctx.root / "cache", name))
    return run


def test_and_demo(name: str) -> Callable[[Context], None]:
    def run(ctx: Context) -> None:
        testiter = 2 if ctx.tiny else 20
        scored = "" if ctx.backend != "none" else "not scored: no evaluator; "
        ctx.steps.run(
            f"test.py {name}", [ctx.py, "test.py", name, "--testiter", testiter, "--config-dir",
                                ctx.configs, "--images", 1 if ctx.tiny else 8, "--device",
                                ctx.device, "--no-resume", "--backend", ctx.backend],
            timeout=240, need=ctx.t(TEST_DEMO_S[name][0], 20),
            measure=lambda out: scored + next((line for line in out.splitlines()
                                               if " images in " in line), ""))
        if ctx.coco128 is not None and name != "CornerNet_Tiny":
            images = sorted((ctx.coco128 / "images").iterdir())
        else:
            images = sorted((ctx.root / "data" / "shapes" / "images" / "val").glob("*.jpg"))
        ctx.steps.run(f"demo.py {name}",
                      [ctx.py, "demo.py", name, "--testiter", testiter, "--config-dir",
                       ctx.configs, "--device", ctx.device, "--images",
                       *images[:1 if ctx.tiny else 4], "--out", ctx.root / "demo" / name,
                       "--thresh", 0.3], timeout=180, need=ctx.t(TEST_DEMO_S[name][1], 15))
    return run


def bench(name: str, modes: tuple[str, ...], gpu: float) -> Callable[[Context], None]:
    def run(ctx: Context) -> None:
        # CPU sizes: the tiny network, one mode, one iteration.
        config, run_modes = ("CornerNet_Tiny", modes[:1]) if ctx.tiny else (name, modes)
        label = f"bench_train {config} {' '.join(run_modes)}"
        if ctx.coco128 is None:
            ctx.steps.add(label, "not run", 0.0, "bench_train reads coco128, which is not here")
            return
        batch = 2 if ctx.tiny else BENCH_BATCH[name]
        sizes = (["--input-size", 127, "--iters", 1, "--warmup", 0] if ctx.tiny
                 else ["--iters", BENCH_ITERS, "--warmup", BENCH_WARMUP])
        output = ctx.steps.run(
            label, [ctx.py, "bench/bench_train.py", "--configs", config, "--modes", *run_modes,
                    "--workers", ctx.workers[name], "--batch", batch, "--device", ctx.device,
                    "--no-breakdown", *sizes], timeout=300,
            need=ctx.t(gpu, 25), measure=lambda out: "rows below")
        for line in (output or "").splitlines():
            parts = line.split()
            if len(parts) >= 6 and parts[0] == config and parts[1] in run_modes:
                memory = "out of memory" in line
                ctx.steps.add(f"  {config} {parts[1]}, batch {batch}",
                              "out of memory" if memory else "ok", 0.0,
                              " ".join(parts[2:]) if memory else
                              f"{parts[3]} images/s, data wait {parts[4]}, peak {parts[5]} GiB "
                              f"({parts[2]} workers)")
    return run


def deploy_rows(output: str) -> list[tuple[str, str, str]]:
    """(precision, status, detail) of each torch row of tools/benchmark.py's table: its ms per
    image at each batch size and its check."""
    lines = [line for line in output.splitlines() if line.startswith("| ")]
    if not lines:
        return []
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[1:]:  # the header's "|---|" line does not start with "| "
        cells = dict(zip(head, (cell.strip() for cell in line.strip("|").split("|"))))
        check = cells.get("check", "")
        status = "ok" if check == "passed" else \
            "not available" if check.startswith("not available") else "FAIL (check)"
        times = ", ".join(f"{cells[key]} {key.removeprefix('ms/img @')}" for key in head
                          if key.startswith("ms") and cells.get(key, "-") != "-")
        rows.append((f"{cells.get('runtime')} {cells.get('precision')}", status,
                     f"ms/image: {times or 'none'}; check {check}"))
    return rows


def deploy_gpu(ctx: Context) -> None:
    # CPU sizes: the tiny network, eager fp32 at batch 1 and 2 (no compile: minutes on a CPU).
    config, rows, batches = (("CornerNet_Tiny", ["torch:fp32"], [1, 2]) if ctx.tiny else
                             ("CornerNet_Squeeze", ["torch:fp32", "torch:bf16", "torch:compile"],
                              [1, 8]))
    label = f"benchmark {config} (random weights) {' '.join(rows)}"
    if ctx.coco128 is None:
        ctx.steps.add(label, "not run", 0.0, "bench_deploy reads coco128, which is not here")
        return
    output = ctx.steps.run(
        label, [ctx.py, "bench/bench_deploy.py", "--configs", config, "--device", ctx.device,
                "--rows", *rows, "--batch", *batches, "--images", 2, "--reps", 5,
                *(["--size", 127] if ctx.tiny else [])],
        timeout=420, need=ctx.t(107, 60), measure=lambda out: "rows below")
    for name, status, detail in deploy_rows(output or ""):
        ctx.steps.add(f"  {config} {name}", status, 0.0, detail)


def deterministic(ctx: Context) -> None:
    name = "CornerNet_Squeeze"
    det = ctx.write_configs(ctx.root / "det", ctx.coco128, tiny=ctx.tiny, deterministic=True,
                            max_iter=4 if ctx.tiny else 6, snapshot=2 if ctx.tiny else 3,
                            display=1, val_iter=0)
    resume_at = 2 if ctx.tiny else 3
    runs = [ctx.steps.run(f"deterministic {name}, run {i}", ctx.train_cmd(name, det),
                          timeout=360, need=ctx.t(DETERMINISTIC_S[i - 1], 25),
                          measure=training_figures)
            for i in (1, 2)]
    resumed = ctx.steps.run(f"deterministic {name}, --iter {resume_at}",
                            [*ctx.train_cmd(name, det), "--iter", resume_at], timeout=240,
                            need=ctx.t(DETERMINISTIC_S[2], 25))
    if all(runs) and resumed:
        first, second, third = losses(runs[0]), losses(runs[1]), losses(resumed)
        equal = first == second and bool(first)
        ctx.steps.add("deterministic: two runs equal", "ok" if equal else "FAIL", 0.0,
                      f"losses of iterations {sorted(first)}: {'equal' if equal else 'DIFFER'}")
        later = {it: loss for it, loss in first.items() if it > resume_at}
        same = later == {it: third.get(it) for it in later} and bool(later)
        ctx.steps.add("deterministic: resume exact", "ok" if same else "FAIL", 0.0,
                      f"losses after iteration {resume_at}: {'equal' if same else 'DIFFER'}")


def dry_run(ctx: Context) -> None:
    ctx.steps.run("train.py --dry-run, CornerNet",
                  [*ctx.train_cmd("CornerNet"), "--dry-run", 2 if ctx.tiny else 20],
                  timeout=180, need=ctx.t(12, 20),
                  measure=lambda out: " ".join(out.split())[-90:])


def two_gpus(ctx: Context) -> None:
    two = ctx.write_configs(ctx.root / "two", ctx.coco128, tiny=ctx.tiny)
    for name in SHORT:
        ctx.steps.run(f"train {name}, 2 GPUs",
                      [ctx.py, "train.py", name, "--config-dir", two, "--workers",
                       ctx.workers[name], "--distributed", "--world-size", 1,
                       "--procs-per-node", 2], timeout=300, need=ctx.t(90, 30),
                      measure=training_figures)


def step_rows(output: str, ctx: Context) -> None:
    """bench/bench_step.py's `row` lines as table rows, its `log` lines into the log."""
    for line in output.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "row":
            name, status, detail = (rest.split("\t") + ["", ""])[:3]
            ctx.steps.add(f"  {name}", status, 0.0, detail)
        elif kind == "log":
            ctx.steps.say(f"    {rest}")


def bench_step(group: str, gpu: float, cpu: float, timeout: float, about: str,
               *extra: str) -> Callable[[Context], None]:
    """A group of bench/bench_step.py (profile, compile, sync) on Squeeze at batch 55; at CPU
    sizes CornerNet_Tiny, batch 2."""
    def run(ctx: Context) -> None:
        output = ctx.steps.run(about, [ctx.py, "bench/bench_step.py", group, "--device",
                                       ctx.device, *(["--tiny"] if ctx.tiny else []), *extra],
                               timeout=timeout, need=ctx.t(gpu, cpu),
                               measure=lambda out: "rows below")
        step_rows(output or "", ctx)
    return run


# The plan that fits one lending of the GPU: 8 minutes, about 2 of them the machine's start.
PLAN_S = 360
# Expected GPU seconds of the step and test-time groups (the second run's).
STEP_S = {"profile": 103, "compile": 197, "sync-check": 19}
TEST_S = {"test-shapes": 16, "test-squeeze-b8": 10}


def test_shapes(ctx: Context) -> None:
    """bench/bench_test_shapes.py on Squeeze (CornerNet_Tiny at CPU sizes): what a new canvas
    shape and the input's layout cost, each row into the log as it is measured."""
    sizes = ["--tiny"] if ctx.tiny else ["--layouts", "nchw", "cl-input"]
    output = ctx.steps.run("test shapes CornerNet_Squeeze",
                           [ctx.py, "bench/bench_test_shapes.py", "--device", ctx.device,
                            *sizes], timeout=240, need=ctx.t(TEST_S["test-shapes"], 15),
                           measure=lambda out: "rows below")
    for line in (output or "").splitlines():
        if " call " in line or "network alone" in line:
            ctx.steps.say(f"    {line}")


def test_batched(name: str) -> Callable[[Context], None]:
    """test.py of the trained snapshot at a batch of 8 on the buckets (the GPU's default),
    32 images: its time line says the ms per image; at CPU sizes 2 images at a batch of 2."""
    def run(ctx: Context) -> None:
        scored = "" if ctx.backend != "none" else "not scored: no evaluator; "
        ctx.steps.run(
            f"test.py {name} --batch {2 if ctx.tiny else 8}",
            [ctx.py, "test.py", name, "--testiter", 2 if ctx.tiny else 20, "--config-dir",
             ctx.configs, "--images", 2 if ctx.tiny else 32, "--batch", 2 if ctx.tiny else 8,
             "--device", ctx.device, "--no-resume", "--backend", ctx.backend],
            timeout=240, need=ctx.t(TEST_S["test-squeeze-b8"], 30),
            measure=lambda out: scored + next((line for line in out.splitlines()
                                               if " images in " in line), ""))
    return run


def _groups() -> dict[str, Group]:
    groups = {
        "profile": Group("Squeeze batch 55 bf16: one forward, shipped chunks, channels_last; "
                         "the step's breakdown; one torch.profiler step", STEP_S["profile"], 40,
                         bench_step("profile", STEP_S["profile"], 40, 240,
                                    "profile CornerNet_Squeeze step")),
        "compile": Group("Squeeze batch 55 at the defaults, compiled: compile seconds, images/s, "
                         "the traceback of a failure", STEP_S["compile"], 40,
                         bench_step("compile", STEP_S["compile"], 40, 420,
                                    "compile CornerNet_Squeeze step")),
        "test-shapes": Group("Squeeze at test time: first and second call per canvas bucket, "
                             "input NCHW against channels-last; the network at batch 8",
                             TEST_S["test-shapes"], 15, test_shapes),
        "sync-check": Group("torch.cuda.set_sync_debug_mode over Squeeze's non-display steps: "
                            "the count of syncs", STEP_S["sync-check"], 30,
                            bench_step("sync", STEP_S["sync-check"], 30, 180,
                                       "sync check CornerNet_Squeeze step")),
        "train-squeeze": Group("train.py CornerNet_Squeeze, 20 iterations at the new defaults",
                               TRAIN_S["CornerNet_Squeeze"], 25, train("CornerNet_Squeeze")),
        "test-squeeze-b8": Group("test.py CornerNet_Squeeze, 32 images at a batch of 8 on the "
                                 "buckets: ms per image warm", TEST_S["test-squeeze-b8"], 30,
                                 test_batched("CornerNet_Squeeze"), needs=("train-squeeze",)),
        "cuda-tests": Group("tests/core/nnet/test_cuda.py and tests/core/utils/test_device.py",
                            19, 20, cuda_tests),
        "test-squeeze": Group("test.py (8 images) and demo.py (4) of its snapshot",
                              sum(TEST_DEMO_S["CornerNet_Squeeze"]), 35,
                              test_and_demo("CornerNet_Squeeze"), needs=("train-squeeze",)),
        "cuda-graphs": Group("Squeeze batch 55 at the defaults, compiled with CUDA graphs "
                             "(reduce-overhead)", STEP_S["compile"], 40,
                             bench_step("compile", STEP_S["compile"], 40, 420,
                                        "CUDA graphs CornerNet_Squeeze step", "--modes",
                                        "reduce-overhead")),
        "bench-squeeze": Group("bench_train CornerNet_Squeeze bf16+cl and fp32",
                               BENCH_S["bench-squeeze"], 25,
                               bench("CornerNet_Squeeze", ("bf16+cl", "fp32"),
                                     BENCH_S["bench-squeeze"])),
        "deploy-gpu": Group("tools/benchmark.py CornerNet_Squeeze: torch fp32, bf16, "
                            "torch.compile at batch 1 and 8", 107, 60, deploy_gpu)}
    for name in ("CornerNet_Tiny", "CornerNet_Saccade", "CornerNet"):
        groups[f"train-{SHORT[name]}"] = Group(f"train.py {name}, 20 iterations",
                                               TRAIN_S[name], 25, train(name))
    groups["deterministic"] = Group("system.deterministic: two runs and a resume, equal losses",
                                    sum(DETERMINISTIC_S), 75, deterministic)
    for name in ("CornerNet_Saccade", "CornerNet"):
        groups[f"test-{SHORT[name]}"] = Group("test.py and demo.py of its snapshot",
                                              sum(TEST_DEMO_S[name]), 35, test_and_demo(name),
                                              needs=(f"train-{SHORT[name]}",))
    more = BENCH_S["bench-squeeze-more"]
    groups["bench-squeeze-more"] = Group("bench_train CornerNet_Squeeze bf16 and fp32+det",
                                         more, 25,
                                         bench("CornerNet_Squeeze", ("bf16", "fp32+det"), more))
    for name in ("CornerNet_Tiny", "CornerNet_Saccade", "CornerNet"):
        key = f"bench-{SHORT[name]}"
        groups[key] = Group(f"bench_train {name}, 4 modes", BENCH_S[key], 25,
                            bench(name, ("bf16+cl", "fp32", "bf16", "fp32+det"), BENCH_S[key]))
    groups["dry-run"] = Group("train.py CornerNet --dry-run 20", 12, 20, dry_run)
    groups["train-2gpu"] = Group("each config on 2 GPUs (only where there are 2)", 360, 120,
                                 two_gpus)
    if set(groups) != set(ORDER):  # a group left out of ORDER would silently never run
        raise RuntimeError(f"bench/_plan.py: ORDER and the groups differ: "
                           f"{sorted(set(groups) ^ set(ORDER))}")
    return {key: groups[key] for key in ORDER}


# Most valuable first: what no GPU run has measured at the GPU defaults (Saccade and CornerNet
# compiled, determinism with a compiled step, CUDA graphs, deployment), then again what the
# second run measured (issue 43's goals), then the eager bench rows.
ORDER = ["cuda-tests", "train-saccade", "test-saccade", "train-cornernet", "test-cornernet",
         "deterministic", "cuda-graphs", "deploy-gpu", "train-squeeze", "test-squeeze-b8",
         "test-squeeze", "profile", "compile", "test-shapes", "sync-check", "bench-squeeze",
         "bench-squeeze-more", "train-tiny", "bench-tiny", "bench-saccade", "bench-cornernet",
         "dry-run", "train-2gpu"]


GROUPS = _groups()


def plan_order(gpus: int) -> list[str]:
    """Every group key in the order they run; two-GPU training only with two GPUs."""
    return [key for key in GROUPS if key != "train-2gpu" or gpus >= 2]


def in_plan(keys: list[str], cpu: bool = False, seconds: float = PLAN_S) -> list[str]:
    """The first of `keys` whose expected times add up to at most `seconds`: what one lending
    of the GPU runs (`--budget 360`)."""
    total, chosen = 0.0, []
    for key in keys:
        total += GROUPS[key].need(cpu)
        if total > seconds:
            break
        chosen.append(key)
    return chosen

"""What a config's model costs.

    cornernet analyze model <Cfg> [--test-size H W] [--device D] [--json PATH] [--set K=V ...]

Prints the parameters (total, trainable under system.freeze, per top-level module), the FLOPs of
one forward of one image at the test input size (default 511 x 511, the size CornerNet-Lite's
numbers are quoted at) and at the training input size (db.input_size), and the activation memory
of a training step of one image on the device (see core/nnet/cost.py for what each counts).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import SystemConfig, load_config
from core.config.options import ConfigOptions, DebugOptions, DeviceOptions
from core.engine.exits import exit_status
from core.engine.process import keeps_process
from core.utils.options import option

from ..options import parse

if TYPE_CHECKING:  # torch and the models are imported by `run`: --help costs no torch
    import torch

PROG = "cornernet analyze model"


DESCRIPTION = "Parameters, FLOPs and activation memory of a config's model"


@dataclasses.dataclass(frozen=True, kw_only=True)
class AnalyzeModelOptions(ConfigOptions, DeviceOptions, DebugOptions):
    """What `cornernet analyze model` takes."""

    test_size: tuple[int, int] = option((511, 511), "--test-size", parse=int, nargs=2,
                                        metavar=("H", "W"),
                                        help="input of the test forward (default 511 511)")
    json: Path | None = option(None, "--json", parse=Path, help="also write the numbers here")
    device: str | None = option(None, "--device",
                                help="where the training step's activation memory is measured: "
                                     "cpu, cuda or cuda:<index> (default: the GPU where there "
                                     "is one)")


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> AnalyzeModelOptions:
    return parse(AnalyzeModelOptions, argv, prog or PROG, DESCRIPTION)


def analyze(system_config: SystemConfig, db_config: dict, test_size: tuple[int, int],
            device: torch.device) -> dict:
    """The numbers the tool prints, as a dict."""
    import torch

    from core.models import build_model
    from core.nnet.cost import (
        cuda_step_peak_bytes,
        forward_flops,
        parameter_counts,
        saved_activation_bytes,
    )
    from core.nnet.freeze import freeze

    with torch.device("meta"):
        model = build_model(system_config.model_name, db_config["categories"])
    freeze(model, system_config.freeze)
    train_size = tuple(db_config["input_size"])
    report = {"config": system_config.snapshot_name, "parameters": parameter_counts(model),
              "test_size": list(test_size), "train_size": list(train_size),
              "test_gflops": forward_flops(model, test_size, test=True) / 1e9,
              "train_gflops": forward_flops(model, train_size, test=False) / 1e9}
    if device.type == "cuda":
        on_device = build_model(system_config.model_name, db_config["categories"]).to(device)
        report["activation_mib"] = cuda_step_peak_bytes(on_device, train_size, device) / 2**20
        report["activation_measure"] = f"peak allocated on {device}"
    else:
        report["activation_mib"] = saved_activation_bytes(model, train_size) / 2**20
        report["activation_measure"] = "saved for backward (counted on the meta device)"
    return report


def format_report(report: dict) -> str:
    params = report["parameters"]
    width = max(len(name) for name in params["modules"])
    head = f"{report['config']}: {params['total']:,} parameters ({params['trainable']:,} trainable)"
    lines = [head]
    lines += [f"  {name:<{width}}  {count:>12,}" for name, count in params["modules"].items()]
    lines.append(f"FLOPs of one forward, test path at {report['test_size'][0]} x "
                 f"{report['test_size'][1]}: {report['test_gflops']:.1f} G")
    lines.append(f"FLOPs of one forward, training path at {report['train_size'][0]} x "
                 f"{report['train_size'][1]}: {report['train_gflops']:.1f} G")
    lines.append(f"activation memory of a training step, one image: "
                 f"{report['activation_mib']:.0f} MiB ({report['activation_measure']})")
    return "\n".join(lines)


@keeps_process
def run(options: AnalyzeModelOptions, log: Callable[[str], None] = print) -> dict:
    from core.models.fit import check_input_fit
    from core.utils.device import resolve_device

    device = resolve_device(options.device)  # --device cuda without a GPU: one line, first
    system_config, db_config = load_config(options.cfg_file, options.config_dir,
                                           overrides=options.overrides)
    check_input_fit(system_config.model_name, options.test_size, "--test-size")
    report = analyze(system_config, db_config, options.test_size, device)
    log(format_report(report))
    if options.json is not None:
        options.json.write_text(json.dumps(report, indent=1))
    return report


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command: exit status of the one table (core/engine/exits.py)."""
    return exit_status(lambda: run(parse_args(argv, prog)), argv=argv)


if __name__ == "__main__":
    sys.exit(main())
